"""Runs a sweep: decides what each run needs (skip, collect, resume, start), runs it as a
`cli.py fit` subprocess with its output teed to `run.log` (forked from a warm process that has imported
the suite once, unless `--no-warm`: `experiments.sweep.warm`), and records the outcome in the ledger.

Outcomes come from the run's own `run.json` (`RunMetadata`, `DivergenceGuard`): done or diverged;
anything else (an exception, a signal) is `failed` with the error's last line. A run is claimed
(`experiments.sweep.claims`) before it starts; one that another live process has claimed is skipped
and left unrecorded (that process's sweep records it).
"""

from __future__ import annotations

import concurrent.futures as cf
import json
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

from contract.files import write_json_atomic
from contract.run_folder import FAILED, FINISHED, RUN_LOG, read_run_json
from experiments.sweep.claims import CLAIM_NAME, Claimed, acquire
from experiments.sweep.commands import Run
from experiments.sweep.ledger import Ledger, collect_row
from experiments.sweep.processes import Processes, tee
from experiments.sweep.provenance import record_attempt
from experiments.sweep.warm import Warm

Action = Literal["skip", "collect", "resume", "start"]
OUTCOME_NAME = "outcome.json"  # a failed attempt of a scheduler job (the pool records its outcomes itself)
SUBMITTED_NAME = "submitted.json"  # the SLURM job a run was submitted to, while it waits in the queue
CLAIMED = "claimed"  # not a ledger status: another process runs the run
RECORDED = "recorded"  # not a ledger status: another sweep ran and recorded the run meanwhile
KEPT_ON_START = (RUN_LOG, CLAIM_NAME)  # a fresh start clears the rest of the run's folder


@dataclass(frozen=True)
class Outcome:
    """How a run ended: done, diverged or failed (with the error's last line); or, not run here,
    `claimed` (another live process runs it; `error` says which) or `recorded` (by another sweep)."""

    status: str
    error: str = ""


def checkpoint_ok(run: Run) -> bool:
    """A complete `last.ckpt` (a zip archive: a kill in mid-write leaves no central directory)."""
    return run.checkpoint.is_file() and zipfile.is_zipfile(run.checkpoint)


def finished_outcome(run: Run) -> Outcome | None:
    """How the run's last attempt ended, from its folder: `run.json` (done, diverged), else a job's
    `outcome.json` (failed); None when it has not ended (never ran, interrupted, or running)."""
    status = read_run_json(run.dir).get("status")
    if status in FINISHED:
        return Outcome(status)
    try:
        found = json.loads((run.dir / OUTCOME_NAME).read_text())
        return Outcome(found["status"], found.get("error", ""))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_outcome(run: Run, result: Outcome) -> None:
    """Leaves a failed attempt's outcome in its folder for the sweep that records it (atomically)."""
    write_json_atomic(run.dir / OUTCOME_NAME, {"status": result.status, "error": result.error})


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
    found = finished_outcome(run)
    if found and (found.status in FINISHED or not retry_failed):
        return "collect"
    return "resume" if checkpoint_ok(run) else "start"


def error_line(output: str, limit: int = 500) -> str:
    """A run's error on one line: the exception of the last traceback (with the rest of a multi-line
    message, which often ends with the cause), else jsonargparse's `error:`, else the last line."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "", output)  # terminal escapes (a bar forced by SUITE_PROGRESS=bar)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for i in range(len(lines) - 1, -1, -1):
        if re.match(r"^([A-Za-z_][\w.]*(Error|Exception|Interrupt)|error)\b.*:", lines[i]):
            message = " ".join(lines[i : i + 10])
            return message if len(message) <= limit else message[: limit - 3] + "..."
    return lines[-1] if lines else ""


def run_outcome(run: Run, returncode: int, output: str) -> Outcome:
    """Reads the outcome from `run.json`; a run that did not finish there failed."""
    status = read_run_json(run.dir).get("status")
    if status in FINISHED:
        return Outcome(status)
    if returncode < 0:
        return Outcome(FAILED, f"killed by signal {signal.Signals(-returncode).name}")
    if returncode == 0:
        return Outcome(FAILED, f"the run exited without finishing (run.json status: {status or 'missing'})")
    return Outcome(FAILED, error_line(output) or f"exit status {returncode}")


def prepare(run: Run, action: Action) -> None:
    """Readies the run's folder for an attempt: a `start` clears what an attempt without a checkpoint
    left (its stale events would join the curves), keeping the log and the claim; a dirty tree's
    patch goes to `git.diff` (`experiments.sweep.provenance`).

    Args:
        run: the run (its claim held by this process).
        action: `start` or `resume`.
    """
    if action == "start" and run.dir.exists():
        for path in run.dir.iterdir():
            if path.name not in KEPT_ON_START and not path.name.startswith((f"{CLAIM_NAME}.", f".{CLAIM_NAME}.")):
                shutil.rmtree(path) if path.is_dir() else path.unlink()
    run.dir.mkdir(parents=True, exist_ok=True)
    for name in (OUTCOME_NAME, SUBMITTED_NAME):  # the last attempt's; this one has started
        (run.dir / name).unlink(missing_ok=True)
    record_attempt(run.dir, run.sweep_dir, action)


def attempt(run: Run, action: Action, echo: bool, procs: Processes, log_name: str = RUN_LOG) -> Outcome:
    """Runs (or resumes) a prepared run to its end, its output appended to `log_name` in its folder.

    Args:
        run: the run.
        action: `start` or `resume` (from `checkpoints/last.ckpt`).
        echo: also show the run's output (its progress lines) on our stdout.
        procs: where the process is registered while it runs.
        log_name: the log file (each further task of a multi-node run keeps its own).
    """
    with (run.dir / log_name).open("ab") as log:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log.write(f"\n=== {stamp} {action}: {run.shell(action == 'resume')}\n".encode())
        log.flush()
        returncode, output = tee(run.argv(action == "resume"), os.environ | run.env(), log, echo, procs)
    return run_outcome(run, returncode, output)


def execute(run: Run, action: Action, echo: bool, procs: Processes) -> Outcome:
    """Prepares and runs (or resumes) one run to its end; see `prepare` and `attempt`."""
    prepare(run, action)
    return attempt(run, action, echo, procs)


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


class Books:
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
        row = collect_row(run.dir, run.cell, run.seed, result.status, result.error, self.axis_values[run.cell])
        self.ledger.put(row)
        self.progress.ended(run, result, started)

    def collect(self, actions: dict[Run, Action]) -> None:
        """Records the runs that ended but are not in the ledger (the sweep stopped right after them, or
        they ran elsewhere: another sweep, a scheduler job)."""
        for run, action in actions.items():
            if action == "collect":
                self.record(run, finished_outcome(run) or Outcome(FAILED, "the outcome vanished"))


def run_claimed(
    run: Run, ledger: Ledger, retry_failed: bool, echo: bool, procs: Processes, progress: Progress
) -> tuple[Outcome | None, float | None]:
    """Claims a run and brings it to an end, unless another process has it.

    The plan is made again once the claim is held: the process that held it before may have finished
    the run (collect it, do not start it over) or recorded it.

    Returns:
        The outcome (None when interrupted) and when it started here.
    """
    try:
        claim = acquire(run.dir)
    except Claimed as held:
        return Outcome(CLAIMED, str(held)), None
    with claim:
        action = plan(run, Ledger(ledger.path, ledger.axes), retry_failed)  # a fresh read: others write it too
        if action == "skip":
            return Outcome(RECORDED), None
        if action == "collect":
            return finished_outcome(run), None
        started = progress.started(run, action)
        result = execute(run, action, echo=echo, procs=procs)
        return (None if procs.stopping else result), started


def run_sweep(
    runs: list[Run],
    ledger: Ledger,
    axis_values: dict[str, dict[str, Any]],
    jobs: int,
    retry_failed: bool,
    warm: bool = True,
) -> list[tuple[Run, str]]:
    """Brings every run of the sweep to an end and records it, except runs other processes have claimed.

    Args:
        runs: all runs, in order.
        ledger: `results.csv`, updated after each run.
        axis_values: each cell's value of every axis key (ledger columns).
        jobs: runs at a time; with more than one, their output goes to `run.log` only.
        retry_failed: run the runs recorded as failed again.
        warm: fork each run from a process that has imported the suite once (`experiments.sweep.warm`)
            instead of starting a fresh interpreter.

    Returns:
        The runs skipped because another live process has claimed them, each with its claim's description.
    """
    actions = {run: plan(run, ledger, retry_failed) for run in runs}
    progress = Progress(len(runs), sum(a == "skip" for a in actions.values()), jobs)
    books = Books(ledger, axis_values, progress)
    procs = Processes(Warm() if warm else None)

    def work(run: Run) -> tuple[Run, Outcome | None, float | None]:
        if procs.stopping:
            return run, None, None
        return run, *run_claimed(run, ledger, retry_failed, jobs == 1, procs, progress)

    books.collect(actions)
    pending = [run for run, action in actions.items() if action in ("resume", "start")]
    if not pending:
        progress.say("nothing to run")
        return books.claimed
    pool = cf.ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = [pool.submit(work, run) for run in pending]
        for future in cf.as_completed(futures):
            run, result, started = future.result()
            if result is not None:
                books.record(run, result, started)  # here only: one thread writes the ledger
    except KeyboardInterrupt:
        # unfinished runs stay unrecorded: the next invocation resumes them from their checkpoints
        progress.say("interrupted: stopping the runs in progress; run the same command again to resume")
        pool.shutdown(wait=False, cancel_futures=True)
        procs.stop()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if procs.warm is not None:
            procs.warm.close()
    return books.claimed
