"""What one invocation of a sweep says and records: progress on stderr, and each run's ledger row as it ends."""

from __future__ import annotations

import sys
import threading
import time
from statistics import fmean
from typing import Any

from contract.run_folder import FAILED
from experiments.records.ledger import Ledger, collect_row
from experiments.sweep.runner import CLAIMED, RECORDED, Action, Outcome, finished_outcome, plan
from experiments.sweep.runs import SEARCH_MARK, Run


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class Progress:
    """Sweep-level progress on stderr: runs finished / total, the run starting, elapsed, ETA.

    The ETA sums an estimate for each run left: the mean duration of its cell's finished runs (search
    points included), else of every finished run, from the ledger's `wall_time_s` and this invocation's
    runs; a run in progress counts what is left of its estimate. So a resumed sweep, or a tuned sweep's
    next round, has an ETA from the start, and a ladder's large cells count as large.

    Args:
        runs: the runs of this round.
        ledger: what earlier invocations recorded (their runs' durations, and which runs are finished).
        retry_failed: failed runs are run again (so they are left, not finished).
        jobs: runs at a time.
    """

    def __init__(self, runs: list[Run], ledger: Ledger, retry_failed: bool, jobs: int):
        self.left = {run.name: run for run in runs if plan(run, ledger, retry_failed) != "skip"}
        self.total, self.finished, self.jobs = len(runs), len(runs) - len(self.left), jobs
        self.start = time.monotonic()
        self.durations: dict[str, list[float]] = {}  # by base cell
        for row in ledger.rows.values():
            if seconds := _seconds(row.get("wall_time_s")):
                self.durations.setdefault(row["cell"].partition(SEARCH_MARK)[0], []).append(seconds)
        self.running: dict[str, float] = {}  # run name -> when it started
        self._lock = threading.Lock()

    def _estimate(self, run: Run) -> float | None:
        own = self.durations.get(run.base_cell)
        every = [d for cell in self.durations.values() for d in cell]
        return fmean(own) if own else fmean(every) if every else None

    def _eta(self) -> str:
        now, seconds = time.monotonic(), 0.0
        for name, run in self.left.items():
            if (estimate := self._estimate(run)) is None:
                return "ETA after the first run"
            seconds += max(estimate - (now - self.running.get(name, now)), 0.0)
        return f"ETA {_clock(seconds / self.jobs)}"

    def say(self, text: str) -> None:
        print(f"[sweep {self.finished}/{self.total}] {text}", file=sys.stderr, flush=True)

    def started(self, run: Run, action: Action) -> float:
        with self._lock:
            self.running[run.name] = time.monotonic()
            how = "resuming from its last checkpoint" if action == "resume" else "starting"
            self.say(f"{how} {run.name} · elapsed {_clock(time.monotonic() - self.start)} · {self._eta()}")
        return self.running[run.name]

    def ended(self, run: Run, result: Outcome, started: float | None) -> None:
        with self._lock:
            self.finished += 1
            self.left.pop(run.name, None)
            self.running.pop(run.name, None)
            if started is not None:  # collected runs took no time here
                self.durations.setdefault(run.base_cell, []).append(time.monotonic() - started)
            note = f": {result.error}" if result.error else ""
            self.say(f"{run.name} {result.status}{note} · {self._eta()}")

    def skipped(self, run: Run, why: str) -> None:
        with self._lock:
            self.left.pop(run.name, None)
            self.running.pop(run.name, None)
            self.say(f"skipping {run.name}: {why}")


def _seconds(text: str | None) -> float | None:
    """A ledger's `wall_time_s`: a positive number, or None (empty: a failed run, or an older ledger)."""
    try:
        value = float(text or "nan")
    except ValueError:
        return None
    return value if value > 0 else None  # False for nan


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
