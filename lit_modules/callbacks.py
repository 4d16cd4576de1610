"""Callbacks every run uses: run metadata for reproducibility, and divergence as an outcome; and the
run folder's files that pin a run's data (`tokenizer.json`)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import subprocess
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

import lightning.pytorch as pl
import torch

from models.config import ConfigError

from .files import write_atomic, write_json_atomic

PACKAGES = ("torch", "torchvision", "lightning", "torchmetrics", "jsonargparse", "tokenizers", "tensorboard")
REPO = Path(__file__).resolve().parent.parent
SWEEP_DIR_VAR = "SWEEP_DIR"  # set by the sweep (experiments/sweep/commands.py): its folder holds outputs, not code
TOKENIZER_FILE = "tokenizer.json"  # beside config.yaml: the vocabulary a run trained with


def code_pathspec(root: Path, exclude: Iterable[Path | str | None] = ()) -> list[str]:
    """The git pathspec of what counts as code: the repository but its folders named `results` (what
    runs wrote) and the `exclude` folders inside it (folders outside it need no excluding, and git
    refuses them; the root itself is code). Shared with `experiments.sweep.provenance`, so a run's
    `git_commit` and its sweep's dirty check never disagree.

    Args:
        root: the repository.
        exclude: folders of outputs (the run's own, its sweep's); None entries are skipped.
    """
    specs = [".", ":(exclude,glob)**/results/**"]
    for folder in exclude:
        try:
            inside = Path(folder).resolve().relative_to(Path(root).resolve()).as_posix()
        except (TypeError, ValueError):  # unset, or outside the repository: nothing to exclude
            continue
        if inside != ".":
            specs.append(f":(exclude){inside}")
    return specs


def git_commit(root: Path = REPO, exclude: Iterable[Path | str | None] = ()) -> str:
    """`HEAD`'s commit, with `-dirty` when the code (`code_pathspec`) differs from it (staged, unstaged
    or untracked files).

    Args:
        root: the repository.
        exclude: folders of outputs (the run's own, its sweep's).
    """
    specs = code_pathspec(root, exclude)
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


def evaluated_run(trainer: pl.Trainer) -> Path | None:
    """The folder of the run whose checkpoint this command loaded (`<run>/checkpoints/x.ckpt` → `<run>`, as
    ModelCheckpoint and the sweep lay runs out); `None` without a checkpoint, or one kept elsewhere."""
    if not trainer.ckpt_path:
        return None
    path = Path(trainer.ckpt_path)
    return path.parent.parent if path.parent.name == "checkpoints" else None


def run_folder(trainer: pl.Trainer) -> Path:
    """Where a command writes about its run: training, the log folder; evaluating or predicting from a
    checkpoint, the checkpoint's run folder, whatever this command's logger says. Call it on every
    process (see run_dir)."""
    log_dir = run_dir(trainer)
    return log_dir if trainer.state.fn == "fit" else evaluated_run(trainer) or log_dir


def _canonical(data: object) -> str:
    return json.dumps(data, sort_keys=True, ensure_ascii=False)


def _summary(data: dict) -> str:
    """`char, 98 tokens, sha256 1a2b3c4d5e6f` of a tokenizer's `to_dict()`."""
    count = f", {len(data['tokens'])} tokens" if isinstance(data.get("tokens"), list) else ""
    return f"{data.get('kind')}{count}, sha256 {hashlib.sha256(_canonical(data).encode()).hexdigest()[:12]}"


def tokenizer_problem(saved: Path, datamodule: object) -> str | None:
    """Why the run's saved tokenizer and the data's disagree; `None` when they agree, or when the run saved
    none or the data has no tokenizer (images, generated tasks: their vocabulary is fixed by the code)."""
    tokenizer = getattr(datamodule, "tokenizer", None)
    if not hasattr(tokenizer, "to_dict") or not saved.is_file():
        return None
    try:
        theirs = json.loads(saved.read_text(encoding="utf-8"))
    except ValueError as e:
        return f"data: the run's tokenizer {saved} is not valid JSON ({e}); restore it from a copy of the run"
    ours = tokenizer.to_dict()
    if _canonical(ours) == _canonical(theirs):
        return None
    first = ""
    if isinstance(ours.get("tokens"), list) and isinstance(theirs.get("tokens"), list):
        diff = next((i for i, (a, b) in enumerate(zip(theirs["tokens"], ours["tokens"])) if a != b), None)
        if diff is not None:
            first = f", first at id {diff}: {theirs['tokens'][diff]!r} (run) vs {ours['tokens'][diff]!r} (data)"
    return (
        f"data: the run's tokenizer {saved} ({_summary(theirs)}) and the data's tokenizer "
        f"({type(datamodule).__name__}: {_summary(ours)}) differ{first}. The text the vocabulary is fitted on "
        f"changed since the run (the default corpus is Python's own documentation, which changes with the Python "
        f"release). Predict or evaluate with the run's vocabulary: --data.tokenizer_file {saved}; train on the "
        f"new data in a new folder."
    )


def check_tokenizer(trainer: pl.Trainer, folder: Path, save: bool = False) -> None:
    """Raises if `folder/tokenizer.json` and the data's tokenizer differ; with `save`, writes the data's
    there when the run has none yet. The first process reads and writes, and its verdict is broadcast so
    every process stops together: a collective, called on every process."""
    problem = None
    if trainer.is_global_zero:
        saved = folder / TOKENIZER_FILE
        problem = tokenizer_problem(saved, trainer.datamodule)
        tokenizer = getattr(trainer.datamodule, "tokenizer", None)
        if save and problem is None and hasattr(tokenizer, "to_dict") and not saved.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            write_atomic(saved, json.dumps(tokenizer.to_dict(), ensure_ascii=False, indent=1))
    problem = trainer.strategy.broadcast(problem)
    if problem:
        raise ConfigError(problem)  # the user's to fix: one line from cli.py, no traceback


class RunMetadata(pl.Callback):
    """Writes `run.json` beside the run's logs (git commit, package versions, data checksum,
    parameter counts, FLOPs, seed) and keeps its `status` current: running, done or diverged.
    The sweep runner reads this file; TensorBoard gets the same facts as a text summary.

    Training also saves the data's tokenizer as `tokenizer.json` there, or, resuming, checks that the data
    still gives the same one (`check_tokenizer`); evaluating a checkpoint checks it against the
    checkpoint's run (`TaskModule.on_load_checkpoint`)."""

    def __init__(self):
        self.info: dict = {}
        self.dir: Path | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.dir = run_dir(trainer)  # every process: see run_dir
        if stage == "fit":
            check_tokenizer(trainer, self.dir, save=True)  # every process: a collective

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
