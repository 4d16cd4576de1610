"""Where a command writes about its run, asked of Lightning's trainer (the names inside a run folder are
`contract.run_folder`'s)."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl

from contract.run_folder import CHECKPOINTS_DIR


def run_dir(trainer: pl.Trainer) -> Path:
    """The run's log folder. `trainer.log_dir` broadcasts rank 0's folder to every process, a
    collective: call it on every process (the callbacks do, in `setup`), never on rank 0 alone."""
    return Path(trainer.log_dir or trainer.default_root_dir)


def evaluated_run(trainer: pl.Trainer) -> Path | None:
    """The folder of the run whose checkpoint this command loaded (`<run>/checkpoints/x.ckpt` → `<run>`, as
    ModelCheckpoint and the sweep lay runs out); `None` without a checkpoint, or one kept elsewhere."""
    return checkpoint_run(trainer.ckpt_path)


def checkpoint_run(ckpt_path: str | Path | None) -> Path | None:
    """`<run>/checkpoints/x.ckpt` → `<run>`; `None` for no checkpoint, or one kept elsewhere."""
    if not ckpt_path:
        return None
    path = Path(ckpt_path)
    return path.parent.parent if path.parent.name == CHECKPOINTS_DIR else None


def run_folder(trainer: pl.Trainer) -> Path:
    """Where a command writes about its run: training, the log folder; evaluating or predicting from a
    checkpoint, the checkpoint's run folder, whatever this command's logger says. Call it on every
    process (see run_dir)."""
    log_dir = run_dir(trainer)
    return log_dir if trainer.state.fn == "fit" else evaluated_run(trainer) or log_dir
