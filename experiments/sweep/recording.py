"""What one invocation of a sweep says and records: progress on stderr, and each run's ledger row as it ends."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from contract.run_folder import FAILED
from experiments.records.ledger import Ledger, collect_row
from experiments.sweep.runner import CLAIMED, RECORDED, Action, Outcome, finished_outcome
from experiments.sweep.runs import Run


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class Progress:
    """Sweep-level progress on stderr: runs finished / total, the run starting, elapsed, ETA.

    Args:
        total: runs in the sweep.
        finished: runs already finished before this invocation.
        jobs: runs at a time (for the ETA).
    """

    def __init__(self, total: int, finished: int, jobs: int):
        self.total, self.finished, self.jobs = total, finished, jobs
        self.start = time.monotonic()
        self.durations: list[float] = []
        self._lock = threading.Lock()

    def _eta(self) -> str:
        if not self.durations:
            return "ETA after the first run"
        left = self.total - self.finished
        return f"ETA {_clock(sum(self.durations) / len(self.durations) * left / self.jobs)}"

    def say(self, text: str) -> None:
        print(f"[sweep {self.finished}/{self.total}] {text}", file=sys.stderr, flush=True)

    def started(self, run: Run, action: Action) -> float:
        with self._lock:
            how = "resuming from its last checkpoint" if action == "resume" else "starting"
            self.say(f"{how} {run.name} · elapsed {_clock(time.monotonic() - self.start)} · {self._eta()}")
        return time.monotonic()

    def ended(self, run: Run, result: Outcome, started: float | None) -> None:
        with self._lock:
            self.finished += 1
            if started is not None:  # collected runs took no time here
                self.durations.append(time.monotonic() - started)
            note = f": {result.error}" if result.error else ""
            self.say(f"{run.name} {result.status}{note} · {self._eta()}")

    def skipped(self, run: Run, why: str) -> None:
        with self._lock:
            self.say(f"skipping {run.name}: {why}")


class Recorder:
    """What one invocation records: the ledger rows of the runs it saw end, and the runs it left to
    other processes (claimed).

    Args:
        ledger: `results.csv`.
        axis_values: each cell's value of every axis key (ledger columns).
        progress: where each outcome is reported.
    """

    def __init__(self, ledger: Ledger, axis_values: dict[str, dict[str, Any]], progress: Progress):
        self.ledger, self.axis_values, self.progress = ledger, axis_values, progress
        self.claimed: list[tuple[Run, str]] = []

    def record(self, run: Run, result: Outcome, started: float | None = None) -> None:
        """Reports an outcome and, unless another process runs the run, writes its ledger row."""
        if result.status == CLAIMED:
            self.claimed.append((run, result.error))
            self.progress.skipped(run, result.error)
            return
        if result.status == RECORDED:
            self.progress.ended(run, result, None)
            return
        values = self.axis_values[run.base_cell] | dict(run.columns)  # a tuned run adds its phase and values
        row = collect_row(run.dir, run.cell, run.seed, result.status, result.error, values)
        self.progress.ended(run, result, started)  # said first: a full disk may refuse the row
        self.ledger.put(row)

    def collect(self, actions: dict[Run, Action]) -> None:
        """Records the runs that ended but are not in the ledger (the sweep stopped right after them, or
        they ran elsewhere: another sweep, a scheduler job)."""
        for run, action in actions.items():
            if action == "collect":
                self.record(run, finished_outcome(run) or Outcome(FAILED, "the outcome vanished"))
