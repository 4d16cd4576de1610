"""Each run's training-step time, beside its loss: `run.json`'s `step_time_ms`, the ledger's column of that name and
the report's `ms/step`, so "is it as good, and faster?" reads from one sweep.

Written here because Lightning's `ThroughputMonitor` logs rates to the logger only and needs a per-family batch-size
function, and its `Timer` times whole stages, validation included; what a run's record needs is one figure.
"""

from __future__ import annotations

import time

import lightning.pytorch as pl

from .callbacks import mark_run


class StepTime(pl.Callback):
    """The mean wall time of a training step (forward, backward, the optimizer step: every batch of an accumulation),
    from `on_train_batch_start` to `on_train_batch_end`, so validation and checkpoint saves fall outside; the first
    `skip` steps (allocator and kernel warm-up, a compile) are left out. No device synchronisation: over many steps a
    GPU's queue stays bounded, so the mean is its step time. A resumed run records its last attempt's mean. Each
    process times its own steps; the first writes its figure (no collective).

    Args:
        skip: the first steps of each attempt left out.
    """

    def __init__(self, skip: int = 5):
        self.skip = skip
        self.seconds, self.steps = 0.0, 0  # the timed steps' total and count
        self._started: float | None = None
        self._pending, self._seen = 0.0, 0  # the step in progress (its batches so far); steps seen this attempt

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx) -> None:
        self._started, self._step = time.perf_counter(), trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx):
        if self._started is None:
            return
        self._pending += time.perf_counter() - self._started
        self._started = None
        if trainer.global_step == self._step:  # accumulating: the optimizer steps at a later batch
            return
        self._seen += 1
        if self._seen > self.skip:
            self.seconds, self.steps = self.seconds + self._pending, self.steps + 1
        self._pending = 0.0

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.steps:
            mark_run(trainer, step_time_ms=round(1e3 * self.seconds / self.steps, 3))
