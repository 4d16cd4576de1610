"""Callbacks every run uses: run metadata for reproducibility, divergence as an outcome, and (a sweep's runs)
a checkpoint where a stopped run stops."""

from __future__ import annotations

import math
import os
import platform
import signal
import threading
import warnings
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from contract.disk import disk_full
from contract.git import git_commit
from contract.machine import cpu_model
from contract.metrics import AVERAGED_SUFFIX
from contract.run_folder import DIVERGED, DONE, FAILED, LAST_CHECKPOINT, RUNNING, SWEEP_DIR_VAR, TEST_STAGE
from contract.run_record import RunRecord, TestRecord, read_run_record
from models.plugins import ACTIVE

from .tokenizer_check import check_tokenizer
from .trainer_paths import evaluated_run, run_dir

TEST_PREFIXES = (f"{TEST_STAGE}/", f"{TEST_STAGE}{AVERAGED_SUFFIX}/")  # the trained weights' and the average's
PACKAGES = ("torch", "torchvision", "lightning", "torchmetrics", "jsonargparse", "tokenizers", "tensorboard")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def machine_facts() -> dict[str, str]:
    """The hardware a run's numbers depend on beyond its code and packages: the CPU (torch's CPU kernels, oneDNN
    and MKL pick code paths by CPU, so one commit's runs can differ by float rounding between machines), the
    instruction set torch's kernels use, and the GPU when one trains."""
    facts = {
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name()
    return facts


class RunMetadata(pl.Callback):
    """Writes `run.json` (`contract.run_record.RunRecord`) beside the run's logs (git commit, package versions,
    data checksum, parameter counts, FLOPs, seed) and keeps its `status` current: running, done, diverged or
    failed (a crash it saw). The sweep runner reads this file; TensorBoard gets the same facts as a text summary.

    Training also saves the data's tokenizer as `tokenizer.json` there, or, resuming, checks that the data
    still gives the same one (`check_tokenizer`); evaluating a checkpoint checks it against the
    checkpoint's run (`TaskModule.on_load_checkpoint`)."""

    def __init__(self):
        self.record: RunRecord | None = None
        self.pending: dict[str, Any] = {}  # marked before fit start (another callback's on_fit_start ran first)
        self.dir: Path | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.dir = run_dir(trainer)  # every process: see run_dir
        if stage == "fit":
            check_tokenizer(trainer, self.dir, save=True)  # every process: a collective

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        datamodule = trainer.datamodule
        self.record = RunRecord(
            status=RUNNING,
            seed=int(os.environ.get("PL_GLOBAL_SEED", -1)),
            git_commit=git_commit(exclude=(self.dir, os.environ.get(SWEEP_DIR_VAR))),
            packages=package_versions(),
            data_checksum=getattr(datamodule, "data_checksum", None),
            # each split's checksum and what `cli.py test` evaluates (text corpora; None elsewhere)
            data_splits=getattr(datamodule, "split_checksums", None),
            test_split=getattr(datamodule, "test_split", None),
            threads=torch.get_num_threads(),
            processes=trainer.world_size,
            **pl_module.model_stats(),
            plugins=tuple(ACTIVE) or None,
            machine=machine_facts(),
            **self.pending,
        )
        self._write(trainer)
        experiment = getattr(trainer.logger, "experiment", None)
        if trainer.is_global_zero and hasattr(experiment, "add_text"):
            experiment.add_text("run", "```\n" + self.record.to_json() + "\n```", 0)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.record is not None:
            status = DONE if self.record.status == RUNNING else self.record.status
            self.mark(trainer, status=status, steps=trainer.global_step)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        # a crash the run sees (a data error met at its first validation, a bad value): `failed`, not `running`
        # forever; an interruption (Ctrl-C, SIGTERM: a sweep's stop) stays `running`, to resume from its checkpoint,
        # and a full disk takes no further write
        crashed = not isinstance(exception, (KeyboardInterrupt, SIGTERMException)) and disk_full(exception) is None
        if crashed and self.record is not None and self.record.status == RUNNING:
            self.mark(trainer, status=FAILED)

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """`cli.py test` of a run's checkpoint records its test metrics, the split and the checkpoint in that
        run's `run.json` (under `test`), so the sweep knows the run was evaluated and the ledger gets the
        numbers. A test of no run's checkpoint changes nothing."""
        run = evaluated_run(trainer)
        if run is None or not trainer.is_global_zero:  # one writer; no collective below this line
            return
        record = read_run_record(run)
        if record is None:
            warnings.warn(f"{run} has no run.json to record the test in", stacklevel=1)
            return
        datamodule = trainer.datamodule
        tested = TestRecord(
            checkpoint=Path(trainer.ckpt_path).name,
            step=pl_module.checkpoint_step if pl_module.checkpoint_step is not None else trainer.global_step,
            test_split=getattr(datamodule, "test_split", None),
            data_splits=getattr(datamodule, "split_checksums", None),
            metrics={k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(TEST_PREFIXES)},
        )
        replace(record, test=tested).write(run)

    def mark(self, trainer: pl.Trainer, **fields: Any) -> None:
        """Sets record fields (a misspelt name is a TypeError) and rewrites the file."""
        if self.record is None:
            self.pending.update(fields)
            return
        self.record = replace(self.record, **fields)
        self._write(trainer)

    def _write(self, trainer: pl.Trainer) -> None:
        if trainer.is_global_zero:  # one writer; no collective below this line
            assert self.dir is not None and self.record is not None, "RunMetadata.on_fit_start has not run"
            self.dir.mkdir(parents=True, exist_ok=True)
            self.record.write(self.dir)


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
        mark_run(trainer, status=DIVERGED, diverged_at_step=trainer.global_step, diverged_loss=value)


class SaveWhenStopped(Checkpoint):
    """A sweep's run told to stop (SIGTERM: the sweep interrupted, its job cancelled; SIGUSR2: its SLURM job warned
    of its time limit, a signal submitit has SLURM send to every process of the job) saves `last.ckpt` at the end
    of the training step in progress, or of the next one, and stops there, so its resumption loses nothing.

    It saves in `on_train_batch_end`, where ModelCheckpoint saves every `checkpoint_every` steps, and, being a
    `Checkpoint`, after every other callback (Lightning runs those last): the state a periodic save holds, which
    resumes exactly. Its own handler takes both signals from `setup` on (Lightning's SIGTERM handler comes later,
    and stops a validation in the middle, unsaved), so a signal in a validation, or before training, stops the run
    after the next step. A run of several processes keeps Lightning's handling and its periodic checkpoint: its
    processes may see the signal at different steps, and a save is a collective.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGUSR2)

    def __init__(self) -> None:
        self.stopping = False
        self._previous: dict[int, Any] = {}

    def _take_signals(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                previous = signal.signal(sig, self._stop)
                self._previous.setdefault(sig, previous)

    def _stop(self, signum: int, frame: Any) -> None:
        self.stopping = True

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit" and trainer.world_size == 1:
            self._take_signals()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._previous:  # again: Lightning set its SIGTERM handler meanwhile
            self._take_signals()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not self.stopping:
            return
        for callback in trainer.checkpoint_callbacks:
            if _saves_last(callback):
                _save_last(trainer, callback)
                break
        raise SIGTERMException  # as Lightning stops a run on SIGTERM


class FinalStep(pl.Callback):
    """The last training step (`max_steps`) is validated and saved, whatever the intervals.

    Lightning validates every `val_check_interval` steps and ModelCheckpoint saves every `every_n_train_steps`
    (a sweep's `checkpoint_every`), so a run whose `max_steps` is no multiple of them would end with its metrics and
    its `last.ckpt` from an earlier step, and a sweep's test would evaluate that checkpoint. At the last step this
    requests a stop, at which Lightning validates (as for early stopping; a plain run's default checkpoint saves
    there), and at the end of training it saves `last.ckpt` where an earlier step's is the last one saved. A plain
    `Callback`: a `Checkpoint` would stop Lightning adding its default ModelCheckpoint. Every process decides alike
    (the step), so a save, a collective, is made by all.
    """

    last = -1  # the run's last step: `max_steps` as fit starts

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # before `BranchPoints` stops a horizons stable run early, at a branch point of the longest run: not its end
        self.last = trainer.max_steps

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if 0 <= self.last <= trainer.global_step:
            trainer.should_stop = True

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not 0 <= self.last <= trainer.global_step:
            return
        for callback in trainer.checkpoint_callbacks:
            # private (lit_modules.private_api): a save at an earlier step, not this one (with none at all,
            # ModelCheckpoint's own `on_train_end`, which runs after this, saves last.ckpt)
            if _saves_last(callback) and callback._last_checkpoint_saved:
                if callback._last_global_step_saved != trainer.global_step:
                    _save_last(trainer, callback)


def _saves_last(callback: Checkpoint) -> bool:
    """A ModelCheckpoint keeping `last.ckpt` in a folder (a sweep's run: its `checkpoints/`)."""
    return isinstance(callback, ModelCheckpoint) and bool(callback.save_last) and bool(callback.dirpath)


def _save_last(trainer: pl.Trainer, callback: ModelCheckpoint) -> None:
    path = str(Path(callback.dirpath) / LAST_CHECKPOINT)
    # as its own save would: resumed, it overwrites a last.ckpt it saved, but versions another's (-v1)
    callback.last_model_path = path
    trainer.save_checkpoint(path)


def mark_run(trainer: pl.Trainer, **fields) -> None:
    """Sets `fields` of the run's `run.json` (`RunRecord`'s names) through its `RunMetadata` callback (rank 0
    writes)."""
    for callback in trainer.callbacks:
        if isinstance(callback, RunMetadata):
            callback.mark(trainer, **fields)
