"""Runs a sweep: decides what each run needs (skip, collect, resume, start), runs it as a
`cli.py fit` subprocess with its output teed to `run.log` (forked from a warm process that has imported
the suite once, unless `--no-warm`: `experiments.sweep.warm`), and records the outcome in the ledger.

Outcomes come from the run's own `run.json` (`RunMetadata`, `DivergenceGuard`): done or diverged;
anything else (an exception, a signal) is `failed` with the error's last line. A run is claimed
(`experiments.sweep.claims`) before it starts; one that another live process has claimed is skipped
and left unrecorded (that process's sweep records it).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from contract.disk import disk_full, disk_full_line, says_disk_full, writing
from contract.files import write_json_atomic
from contract.run_folder import DONE, FAILED, FINISHED, RUN_LOG
from contract.run_record import RunRecordError, read_run_record
from experiments.records.ledger import Ledger
from experiments.sweep.claims import CLAIM_NAME
from experiments.sweep.processes import Processes, tee
from experiments.sweep.provenance import record_attempt
from experiments.sweep.runs import Run

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


# a sharded run's (`--trainer.strategy=fsdp2`) last.ckpt is a folder of torch.distributed.checkpoint's shards: whole
# when its index and Lightning's state are there (lit_modules.sharded_checkpoints; it is swapped in whole)
SHARDED_CHECKPOINT_FILES = (".metadata", "meta.pt")


def checkpoint_ok(run: Run) -> bool:
    """A complete `last.ckpt`: a zip archive (a kill in mid-write leaves no central directory), or a sharded
    run's checkpoint folder with its index and Lightning's state."""
    if run.checkpoint.is_dir():
        return all((run.checkpoint / name).is_file() for name in SHARDED_CHECKPOINT_FILES)
    return run.checkpoint.is_file() and zipfile.is_zipfile(run.checkpoint)


def unreadable_record_fails(read: Callable[..., Outcome | None]) -> Callable[..., Outcome | None]:
    """A `run.json` this code cannot read (another schema version, a hand-edited file) makes the run failed with
    that one line: the sweep goes on, and nothing in the folder is cleared (`--retry-failed` runs it again)."""

    @functools.wraps(read)
    def guarded(*args, **kwargs) -> Outcome | None:
        try:
            return read(*args, **kwargs)
        except RunRecordError as err:
            return Outcome(FAILED, str(err))

    return guarded


@unreadable_record_fails
def finished_outcome(run: Run) -> Outcome | None:
    """How the run's last attempt ended, from its folder: `run.json` (done, diverged), else a job's
    `outcome.json` (failed); None when it has not ended (never ran, interrupted, or running)."""
    record = read_run_record(run.dir)
    status = record.status if record else None
    if status in FINISHED and not (status == DONE and run.evaluate and record.test is None):
        return Outcome(status)  # (a run to evaluate has finished once its test is recorded too)
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
        checkpoint) or start. A run that failed for a full disk runs again (resumes) without `retry_failed`:
        the same command, once there is space, completes the sweep.
    """
    row = ledger.get(run.cell, run.seed)
    if row and (row["status"] in FINISHED or not (retry_failed or says_disk_full(row.get("error") or ""))):
        return "skip"
    found = finished_outcome(run)
    if found and (found.status in FINISHED or not (retry_failed or says_disk_full(found.error))):
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


@unreadable_record_fails
def run_outcome(run: Run, returncode: int, output: str) -> Outcome:
    """Reads the outcome from `run.json`; a run that did not finish there failed."""
    record = read_run_record(run.dir)
    status = record.status if record else None
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


@unreadable_record_fails
def attempt(run: Run, action: Action, echo: bool, procs: Processes, log_name: str = RUN_LOG) -> Outcome:
    """Runs (or resumes) a prepared run to its end, its output appended to `log_name` in its folder.

    Args:
        run: the run.
        action: `start` or `resume` (from `checkpoints/last.ckpt`).
        echo: also show the run's output (its progress lines) on our stdout.
        procs: where the process is registered while it runs.
        log_name: the log file (each further task of a multi-node run keeps its own).
    """
    record = read_run_record(run.dir)
    trained = record is not None and record.status == DONE  # an earlier attempt trained it: only the test is left
    with RunLog(run.dir / log_name) as log:
        if not trained:
            returncode, output = _logged(run.argv(action == "resume"), action, run, log, echo, procs)
            result = log.outcome(run_outcome(run, returncode, output))
            if result.status != DONE or not run.evaluate or procs.stopping:
                return result
        if run.evaluate:
            returncode, output = _logged(run.test_argv(), "test", run, log, echo, procs)
            record = read_run_record(run.dir)
            if record is None or record.test is None:
                return log.outcome(Outcome(FAILED, f"test: {error_line(output) or f'exit status {returncode}'}"))
    return Outcome(DONE)


class RunLog:
    """A run's log, appended to unbuffered; a write the disk has no space for is dropped with the rest of the
    attempt's output (`full`), while the run goes on: its own writes decide its outcome (`outcome`).

    Args:
        path: the log file.
    """

    def __init__(self, path: Path):
        self.path, self.full = path, None
        with writing(path):
            self.file = path.open("ab", buffering=0)

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()

    def write(self, data: bytes) -> None:
        if self.full is not None:
            return
        try:
            with writing(self.path):
                self.file.write(data)
        except OSError as err:
            if disk_full(err) is None:
                raise
            self.full = err

    def flush(self) -> None:
        pass  # unbuffered

    def outcome(self, result: Outcome) -> Outcome:
        """`result`, or, for a run that failed after its log filled the disk, the full disk as its error (unless
        the run's own error says so already)."""
        if self.full is None or result.status in FINISHED or says_disk_full(result.error):
            return result
        return Outcome(FAILED, disk_full_line(self.full))


def _logged(argv: list[str], what: str, run: Run, log: RunLog, echo: bool, procs: Processes) -> tuple[int, str]:
    """Runs one command of the run, its output appended to the log after a line saying what it is."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    log.write(f"\n=== {stamp} {what}: {run.shell_of(argv)}\n".encode())
    log.flush()
    return tee(argv, os.environ | run.env(), log, echo, procs)


def execute(run: Run, action: Action, echo: bool, procs: Processes) -> Outcome:
    """Prepares and runs (or resumes) one run to its end; see `prepare` and `attempt`."""
    prepare(run, action)
    return attempt(run, action, echo, procs)
