"""Progress as plain lines, for logs and pipes: one line per validation instead of a live bar.

A live progress bar redraws itself with carriage returns and escape sequences; in a file (a sweep's
`run.log`, a SLURM log, `cli.py fit ... > log`) that is thousands of partial lines. `lit_modules.suite_cli`
uses `LineProgress` instead when stdout is not a terminal, or when `SUITE_PROGRESS=lines` (what
the sweep sets for its runs); `SUITE_PROGRESS=bar` keeps the bar.

    step 150/300  train/loss 2.412  val/loss 2.298  val/ppl 9.954  elapsed 0m41s
"""

from __future__ import annotations

import os
import sys
import time

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ProgressBar

from contract.run_folder import PROGRESS_BAR, PROGRESS_LINES, PROGRESS_VAR


def wants_lines() -> bool:
    """Whether a run should print progress lines rather than draw a live bar."""
    choice = os.environ.get(PROGRESS_VAR, "").strip().lower()
    if choice in (PROGRESS_LINES, PROGRESS_BAR):
        return choice == PROGRESS_LINES
    return not sys.stdout.isatty()


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def _number(value) -> str:
    value = float(value)  # a logged metric: a scalar tensor
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"


class LineProgress(ProgressBar):
    """A `ProgressBar` (so Lightning adds no bar of its own) that prints, on rank 0, one line after each
    validation of a `fit` (step, train loss, every `val/` metric, elapsed time), one line of metrics after
    `validate`/`test`, and one when training ends. The sanity check prints nothing."""

    def __init__(self) -> None:
        super().__init__()
        self._enabled = True
        self._start = time.monotonic()

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    def _say(self, head: str, trainer: pl.Trainer, prefixes: tuple[str, ...]) -> None:
        if not self._enabled:
            return
        metrics = trainer.callback_metrics
        shown = [f"{k} {_number(v)}" for k, v in sorted(metrics.items()) if k.startswith(prefixes)]
        print("  ".join([head, *shown, f"elapsed {_clock(time.monotonic() - self._start)}"]), flush=True)

    def _step(self, trainer: pl.Trainer) -> str:
        total = trainer.max_steps if trainer.max_steps > 0 else None
        return f"step {trainer.global_step}" + (f"/{total}" if total else "")

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = time.monotonic()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        if trainer.state.fn == "fit":
            self._say(self._step(trainer), trainer, ("train/loss", "val/"))
        else:
            self._say("validate", trainer, ("val/",))

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._say("test", trainer, ("test/",))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._say(f"done: {self._step(trainer)}", trainer, ())
