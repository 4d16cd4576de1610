"""Callbacks every run uses: run metadata for reproducibility, and divergence as an outcome."""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

import lightning.pytorch as pl
import torch

from .files import write_json_atomic

PACKAGES = ("torch", "torchvision", "lightning", "torchmetrics", "jsonargparse", "tokenizers", "tensorboard")
REPO = Path(__file__).resolve().parent.parent
SWEEP_DIR_VAR = "SWEEP_DIR"  # set by the sweep (experiments/sweep/commands.py): its folder holds outputs, not code


def git_commit(root: Path = REPO, exclude: tuple[Path | str | None, ...] = ()) -> str:
    """`HEAD`'s commit, with `-dirty` when the code differs from it (staged, unstaged or untracked files).

    Not code, so not counted (the rule of `experiments.sweep.provenance`, which a test holds equal):
    folders named `results` (what runs wrote) and the `exclude` folders inside the repository.

    Args:
        root: the repository.
        exclude: folders of outputs (the run's own, its sweep's).
    """
    specs = [".", ":(exclude,glob)**/results/**"]
    for folder in exclude:
        try:
            inside = Path(folder).resolve().relative_to(root.resolve()).as_posix()
        except (TypeError, ValueError):  # unset, or outside the repository: nothing to exclude
            continue
        if inside != ".":  # the repository itself holds the code too
            specs.append(f":(exclude){inside}")
    git = ["git", "--no-optional-locks"]  # no index refresh under its lock: others may be committing
    try:
        out = subprocess.run([*git, "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--", *specs], cwd=root, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if out.returncode != 0 or dirty.returncode != 0:  # not a repository (or no git): never a false "clean"
        return "unknown"
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def run_dir(trainer: pl.Trainer) -> Path:
    """The run's log folder. `trainer.log_dir` broadcasts rank 0's folder to every process, a
    collective: call it on every process (the callbacks do, in `setup`), never on rank 0 alone."""
    return Path(trainer.log_dir or trainer.default_root_dir)


class RunMetadata(pl.Callback):
    """Writes `run.json` beside the run's logs (git commit, package versions, data checksum,
    parameter counts, FLOPs, seed) and keeps its `status` current: running, done or diverged.
    The sweep runner reads this file; TensorBoard gets the same facts as a text summary."""

    def __init__(self):
        self.info: dict = {}
        self.dir: Path | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.dir = run_dir(trainer)  # every process: see run_dir

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        datamodule = trainer.datamodule
        self.info = {
            "status": "running",
            "seed": int(os.environ.get("PL_GLOBAL_SEED", -1)),
            "git_commit": git_commit(exclude=(self.dir, os.environ.get(SWEEP_DIR_VAR))),
            "packages": package_versions(),
            "data_checksum": getattr(datamodule, "data_checksum", None),
            "threads": torch.get_num_threads(),
            "processes": trainer.world_size,
            **pl_module.model_stats(),
        }
        self._write(trainer)
        experiment = getattr(trainer.logger, "experiment", None)
        if trainer.is_global_zero and hasattr(experiment, "add_text"):
            experiment.add_text("run", "```\n" + json.dumps(self.info, indent=2, default=str) + "\n```", 0)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.info.get("status") == "running":
            self.info["status"] = "done"
        self.info["steps"] = trainer.global_step
        self._write(trainer)

    def mark(self, trainer: pl.Trainer, **fields) -> None:
        self.info.update(fields)
        self._write(trainer)

    def _write(self, trainer: pl.Trainer) -> None:
        if trainer.is_global_zero:  # one writer; no collective below this line
            assert self.dir is not None, "RunMetadata.setup has not run"
            self.dir.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.dir / "run.json", self.info)


class DivergenceGuard(pl.Callback):
    """Stops a run whose training loss is non-finite or above `max_loss`, and records it as
    `diverged` with the step: instability is a result, not a crash. Under DDP every process checks
    its own loss and they agree (a collective every step, on every process) so all stop together.

    Args:
        max_loss: loss bound; `None` checks finiteness only.
    """

    def __init__(self, max_loss: float | None = None):
        self.max_loss = max_loss

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        value = float(loss.detach())
        bad = not (math.isfinite(value) and (self.max_loss is None or value <= self.max_loss))
        if not trainer.strategy.reduce_boolean_decision(bad, all=False):  # any process diverged
            return
        trainer.should_stop = True
        for callback in trainer.callbacks:
            if isinstance(callback, RunMetadata):
                callback.mark(trainer, status="diverged", diverged_at_step=trainer.global_step, diverged_loss=value)
