"""Runs a sweep: decides what each run needs (skip, collect, resume, start), runs it as a
`cli.py fit` subprocess with its output teed to `run.log`, and records the outcome in the ledger.

Outcomes come from the run's own `run.json` (`RunMetadata`, `DivergenceGuard`): done or diverged;
anything else (an exception, a signal) is `failed` with the error's last line.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import re
import shutil
import signal
import sys
import threading
import time
import zipfile
from dataclasses import dataclass
from typing import Any, Literal

from experiments.commands import Run
from experiments.ledger import FINISHED, Ledger, collect_row, read_run_json
from experiments.processes import Processes, tee

Action = Literal["skip", "collect", "resume", "start"]


@dataclass(frozen=True)
class Outcome:
    """How a run ended: done, diverged or failed (with the error's last line)."""

    status: str
    error: str = ""


def checkpoint_ok(run: Run) -> bool:
    """A complete `last.ckpt` (a zip archive: a kill in mid-write leaves no central directory)."""
    return run.checkpoint.is_file() and zipfile.is_zipfile(run.checkpoint)


def plan(run: Run, ledger: Ledger, retry_failed: bool) -> Action:
    """What a run needs now.

    Args:
        run: the run.
        ledger: what earlier invocations recorded.
        retry_failed: run again the runs recorded as failed.

    Returns:
        skip (recorded as finished, or failed without `retry_failed`), collect (finished but not
        recorded: the sweep stopped right after it, or it ran elsewhere), resume (from its last
        checkpoint) or start.
    """
    row = ledger.get(run.cell, run.seed)
    if row and (row["status"] in FINISHED or not retry_failed):
        return "skip"
    if read_run_json(run.dir).get("status") in FINISHED:
        return "collect"
    return "resume" if checkpoint_ok(run) else "start"


def error_line(output: str, limit: int = 500) -> str:
    """A run's error on one line: the exception of the last traceback (with the rest of a multi-line
    message, which often ends with the cause), else jsonargparse's `error:`, else the last line."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "", output)  # progress-bar escapes
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for i in range(len(lines) - 1, -1, -1):
        if re.match(r"^([A-Za-z_][\w.]*(Error|Exception|Interrupt)|error)\b.*:", lines[i]):
            message = " ".join(lines[i : i + 10])
            return message if len(message) <= limit else message[: limit - 3] + "..."
    return lines[-1] if lines else ""


def outcome(run: Run, returncode: int, output: str) -> Outcome:
    """Reads the outcome from `run.json`; a run that did not finish there failed."""
    status = read_run_json(run.dir).get("status")
    if status in FINISHED:
        return Outcome(status)
    if returncode < 0:
        return Outcome("failed", f"killed by signal {signal.Signals(-returncode).name}")
    if returncode == 0:
        return Outcome("failed", f"the run exited without finishing (run.json status: {status or 'missing'})")
    return Outcome("failed", error_line(output) or f"exit status {returncode}")


def execute(run: Run, action: Action, echo: bool, procs: Processes) -> Outcome:
    """Runs (or resumes) one run to its end.

    Args:
        run: the run.
        action: `start` (from scratch, clearing what an attempt without a checkpoint left) or `resume`.
        echo: also show the run's output (and Lightning's progress bar) on our stdout.
        procs: where the process is registered while it runs.
    """
    if action == "start" and run.dir.exists():
        for path in run.dir.iterdir():  # stale events of a dead attempt would join the curves
            if path.name != "run.log":
                shutil.rmtree(path) if path.is_dir() else path.unlink()
    run.dir.mkdir(parents=True, exist_ok=True)
    with (run.dir / "run.log").open("ab") as log:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log.write(f"\n=== {stamp} {action}: {run.shell(action == 'resume')}\n".encode())
        log.flush()
        returncode, output = tee(run.argv(action == "resume"), os.environ | run.env(), log, echo, procs)
    return outcome(run, returncode, output)


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


def run_sweep(
    runs: list[Run], ledger: Ledger, axis_values: dict[str, dict[str, Any]], jobs: int, retry_failed: bool
) -> None:
    """Brings every run of the sweep to an end and records it.

    Args:
        runs: all runs, in order.
        ledger: `results.csv`, updated after each run.
        axis_values: each cell's value of every axis key (ledger columns).
        jobs: runs at a time; with more than one, their output goes to `run.log` only.
        retry_failed: run the runs recorded as failed again.
    """
    actions = {run: plan(run, ledger, retry_failed) for run in runs}
    progress = Progress(len(runs), sum(a == "skip" for a in actions.values()), jobs)
    procs = Processes()

    def record(run: Run, result: Outcome) -> None:
        ledger.put(collect_row(run.dir, run.cell, run.seed, result.status, result.error, axis_values[run.cell]))

    def work(run: Run) -> tuple[Run, Outcome | None]:
        if procs.stopping:
            return run, None
        started = progress.started(run, actions[run])
        result = execute(run, actions[run], echo=jobs == 1, procs=procs)
        if not procs.stopping:
            progress.ended(run, result, started)
        return run, result

    for run, action in actions.items():
        if action == "collect":  # finished, only the ledger missed it
            result = Outcome(read_run_json(run.dir)["status"])
            record(run, result)
            progress.ended(run, result, None)
    pending = [run for run, action in actions.items() if action in ("resume", "start")]
    if not pending:
        progress.say("nothing to run")
        return
    pool = cf.ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = [pool.submit(work, run) for run in pending]
        for future in cf.as_completed(futures):
            run, result = future.result()
            if result is not None:
                record(run, result)  # here only: one thread writes the ledger
    except KeyboardInterrupt:
        # unfinished runs stay unrecorded: the next invocation resumes them from their checkpoints
        progress.say("interrupted: stopping the runs in progress; run the same command again to resume")
        pool.shutdown(wait=False, cancel_futures=True)
        procs.stop()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
