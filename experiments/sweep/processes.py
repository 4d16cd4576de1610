"""Run processes of a sweep: output teed to a log (and the terminal), and stopped together when the
sweep is interrupted. Each is a fresh `python cli.py fit`, or, with a `Warm`, forked from a process
that has imported the suite once (`experiments.sweep.warm`)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import signal
import subprocess
import sys
import termios
import threading
from collections.abc import Iterator
from types import FrameType
from typing import BinaryIO, Protocol

from experiments.sweep.spec import ROOT
from experiments.sweep.warm import Warm

TAIL_BYTES = 64 * 1024  # enough output to find the error line of a traceback


class Proc(Protocol):
    """What a run's process offers: a `subprocess.Popen`, or a `experiments.sweep.warm.WarmProcess`."""

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


class Processes:
    """The runs in progress, so an interrupted sweep can stop them.

    Args:
        warm: fork runs from warm processes (see `experiments.sweep.warm`); None: each a fresh process.
    """

    def __init__(self, warm: Warm | None = None) -> None:
        self._procs: set[Proc] = set()
        self._lock = threading.Lock()
        self.stopping = False
        self.warm = warm

    def start(self, argv: list[str], env: dict[str, str], output: int) -> Proc | None:
        """Starts `argv` in the repository root with `env`, its stdout and stderr `output`, stdin empty;
        None when the sweep was interrupted while a warm start waited (it starts nothing more)."""
        if self.warm is not None:
            proc = self.warm.start(argv, env, str(ROOT), output)
            if proc is not None:
                return proc
            if self.stopping:
                return None
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=output, stderr=output)

    def add(self, proc: Proc) -> None:
        with self._lock:
            self._procs.add(proc)
        if self.stopping:  # started while the sweep was being interrupted
            proc.terminate()

    def remove(self, proc: Proc) -> None:
        with self._lock:
            self._procs.discard(proc)

    def stop(self) -> None:
        self.stopping = True
        if self.warm is not None:
            self.warm.stop()
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
    """Runs `argv` in the repository root (`Processes.start`), copying its output to `log` and, with
    `echo`, to our stdout.

    On a terminal the run gets a pseudo-terminal (colours, line buffering); its progress is still one
    line per validation (`SUITE_PROGRESS=lines`, set by `experiments.sweep.runs`), since the
    same bytes go to `run.log`.

    Returns:
        The exit status and the last `TAIL_BYTES` of the output.
    """
    if echo and sys.stdout.isatty():
        source, sink = pty.openpty()
        _copy_window_size(sink)
    else:
        source, sink = os.pipe()
    try:
        proc = procs.start(argv, env, sink)
    except BaseException:
        os.close(source)
        raise
    finally:
        os.close(sink)  # the run holds it: the output ends when the run (and its children) have exited
    if proc is None:  # never started (the sweep is stopping): as if terminated at once
        os.close(source)
        return -signal.SIGTERM, ""
    procs.add(proc)
    tail = bytearray()
    stopped_here = False
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
    except BaseException:  # interrupted here (a job's task): the caller stops the run (`Processes.stop`)
        stopped_here = proc.poll() is None
        raise
    finally:
        if not stopped_here:  # else the run stays registered, its output open: a write to a closed pipe kills it
            os.close(source)
            procs.remove(proc)


@contextlib.contextmanager
def terminate_as_interrupt(*signals: signal.Signals) -> Iterator[None]:
    """These signals (default SIGTERM: `kill`, a scheduler's preemption) raise KeyboardInterrupt like
    Ctrl-C, so the runs in progress are stopped (and their claims released) instead of left running.

    Args:
        signals: the signals; SIGTERM if none.
    """

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, interrupt) for sig in signals or (signal.SIGTERM,)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
