"""Runs a sweep: decides what each run needs (skip, resume, start), runs it as a `cli.py fit`
subprocess with its output teed to `run.log`, and records the outcome in the ledger.

Outcomes come from the run's own `run.json` (`RunMetadata`, `DivergenceGuard`): done or diverged;
anything else (an exception, a signal) is `failed` with the error's last line.
"""

from __future__ import annotations

import concurrent.futures as cf
import fcntl
import os
import pty
import re
import shutil
import signal
import subprocess
import sys
import termios
import threading
import time
import zipfile
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal

from experiments.commands import Run
from experiments.ledger import FINISHED, Ledger, collect_row, read_run_json
from experiments.spec import ROOT

Action = Literal["skip", "collect", "resume", "start"]
TAIL_BYTES = 64 * 1024  # enough output to find the error line of a traceback


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


def error_line(output: str) -> str:
    """The line of a run's output naming its error: the exception line of the last traceback, else
    jsonargparse's `error:` line, else the last non-empty line."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "", output)  # progress-bar escapes
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^([A-Za-z_][\w.]*(Error|Exception|Interrupt)|error)\b.*:", line):
            return line
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


class Processes:
    """The runs in progress, so an interrupted sweep can stop them."""

    def __init__(self) -> None:
        self._procs: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self.stopping = False

    def add(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.add(proc)

    def remove(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.discard(proc)

    def stop(self) -> None:
        self.stopping = True
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _copy_window_size(target: int) -> None:
    try:
        size = fcntl.ioctl(sys.stdout.fileno(), termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(target, termios.TIOCSWINSZ, size)
    except OSError:
        pass


def _echo(chunk: bytes) -> None:
    out = getattr(sys.stdout, "buffer", None)  # a replaced stdout (tests, notebooks) may be text-only
    if out is not None:
        out.write(chunk)
        out.flush()
    else:
        sys.stdout.write(chunk.decode(errors="replace"))
        sys.stdout.flush()


def tee(argv: list[str], env: dict[str, str], log: BinaryIO, echo: bool, procs: Processes) -> tuple[int, str]:
    """Runs `argv` in the repository root, copying its output to `log` and, with `echo`, to our stdout.

    On a terminal the run gets a pseudo-terminal, so Lightning draws its usual live progress bar.

    Returns:
        The exit status and the last `TAIL_BYTES` of the output.
    """
    terminal = echo and sys.stdout.isatty()
    if terminal:
        source, sink = pty.openpty()
        _copy_window_size(sink)
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink)
        os.close(sink)
    else:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        source = proc.stdout.fileno()
    procs.add(proc)
    tail = bytearray()
    try:
        while True:
            try:
                chunk = os.read(source, 65536)
            except OSError:  # EIO: the child closed its side of the pseudo-terminal
                break
            if not chunk:
                break
            log.write(chunk)
            if echo:
                _echo(chunk)
            tail += chunk
            del tail[:-TAIL_BYTES]
        return proc.wait(), tail.decode(errors="replace")
    finally:
        if terminal:
            os.close(source)
        else:
            proc.stdout.close()
        procs.remove(proc)


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
    minutes, secs = divmod(int(round(seconds)), 60)
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
        self.running = 0
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
            self.running += 1
            how = "resuming from its last checkpoint" if action == "resume" else "starting"
            self.say(f"{how} {run.name} · elapsed {_clock(time.monotonic() - self.start)} · {self._eta()}")
        return time.monotonic()

    def ended(self, run: Run, result: Outcome, started: float | None) -> None:
        with self._lock:
            self.finished += 1
            if started is not None:
                self.running -= 1
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

    def work(run: Run) -> tuple[Run, Outcome]:
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
            record(run, result)  # here only: one thread writes the ledger
    except KeyboardInterrupt:
        # unfinished runs stay unrecorded: the next invocation resumes them from their checkpoints
        progress.say("interrupted: stopping the runs in progress; run the same command again to resume")
        procs.stop()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
