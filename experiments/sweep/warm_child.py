"""A run forked by the zygote (`experiments.sweep.zygote`) becomes what `python cli.py fit ...` would be,
and exits as CPython does (see `experiments.sweep.warm`)."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import runpy
import signal
import sys
import threading
import traceback
from dataclasses import dataclass
from types import TracebackType
from typing import NoReturn

PR_SET_PDEATHSIG = 1


@dataclass
class Job:
    """What a forked child runs: `argv` (`python SCRIPT ARGS`) in `cwd` with `env`, writing to `output`."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    output: int
    banner: bytes  # what the imports printed: a fresh process prints it too
    dispositions: dict[int, object]  # the signal handlers the zygote changed, as a fresh interpreter has them
    zygote: int


def die_with(parent: int) -> None:
    """SIGKILL when the zygote dies: its sweep could no longer learn how the run ended (Linux only)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the line above
        os._exit(1)


def from_script(tb: TracebackType | None, script: str) -> TracebackType | None:
    """The traceback from the script's first frame on, as `python SCRIPT` prints it (without the
    zygote's and runpy's frames above it)."""
    first = tb
    while first is not None and first.tb_frame.f_code.co_filename != script:
        first = first.tb_next
    return first or tb


def flush_stdio() -> None:
    """stderr, then stdout, errors ignored (CPython's `flush_io`)."""
    for stream in (sys.stderr, sys.stdout):
        with contextlib.suppress(Exception):
            stream.flush()


def exit_status(code: object) -> int:
    """The status of `SystemExit(code)`, as CPython's `handle_system_exit` gives it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def finish(status: int, interrupted: bool) -> NoReturn:
    """Exits as CPython's `Py_FinalizeEx` does observably, in its order: waits for non-daemon threads,
    runs the atexit handlers, flushes stdout and stderr; an uncaught KeyboardInterrupt ends by SIGINT.
    It then skips tearing down the heap: freeing every module and object writes to every page the child
    shares with the zygote (2–3 s of copies per run on a loaded 2-core machine), and its only other effect
    would be `__del__` of objects still alive at exit, which Python does not promise to call."""
    threading._shutdown()  # private, as in multiprocessing's own child exit (`BaseProcess._bootstrap`)
    atexit._run_exitfuncs()
    flush_stdio()
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status & 0xFF)


def run(job: Job) -> NoReturn:
    """In the forked child: becomes `python SCRIPT ARGS` as a fresh interpreter would start it, runs it,
    and exits with its status (see `finish`)."""
    die_with(job.zygote)
    for sig, handler in job.dispositions.items():
        signal.signal(sig, handler)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(job.output, 1)
    os.dup2(job.output, 2)
    os.close(job.output)
    if not sys.stdout.write_through:  # as CPython's stdio set-up: stdout line-buffered on a terminal only
        sys.stdout.reconfigure(line_buffering=os.isatty(1))
    os.chdir(job.cwd)
    os.environ.clear()
    os.environ.update(job.env)
    script = os.path.abspath(job.argv[1])
    sys.argv = job.argv[1:]
    sys.path[0] = os.path.dirname(script)
    if "numpy" in sys.modules:  # a fresh interpreter's global RandomState is seeded from the OS
        sys.modules["numpy"].random.seed()
    if job.banner:
        os.write(1, job.banner)
    interrupted = False
    try:
        try:
            runpy.run_path(script, run_name="__main__")
        finally:
            flush_stdio()  # as CPython after a script (`flush_io`), before it prints an error
        status = 0
    except SystemExit as exit:
        status = exit_status(exit.code)
    except BaseException as error:  # noqa: BLE001 (uncaught: the traceback, then status 1, as CPython)
        tb = from_script(error.__traceback__, script)
        try:
            sys.excepthook(type(error), error.with_traceback(tb), tb)
        except BaseException:  # noqa: BLE001
            traceback.print_exception(error)
        status, interrupted = 1, isinstance(error, KeyboardInterrupt)
    finish(status, interrupted)
