"""Warm starts: a sweep's runs forked from a process that has imported the suite once.

A fresh `python cli.py fit` spends seconds importing torch, Lightning, torchmetrics and jsonargparse
before its first step. The pool launcher instead keeps one warm process (a "zygote") per run
environment: it imports `PRELOAD` once, runs no torch op and starts no thread, and forks one child per
run. The child becomes what `python cli.py fit ...` would be at that point: the run's environment,
working directory, `sys.argv` (its script path made absolute by runpy), signal dispositions and stdio
(the pipe or pseudo-terminal that `experiments.sweep.processes.tee` reads, stdout line-buffered exactly
when it is a terminal; what the imports printed, printed again), runs the script through
`runpy.run_path` as `__main__` (`__spec__` None, so Lightning's DDP launcher starts further ranks as
`python cli.py ...`), and exits as CPython does (`finish`): stdio flushed before an error is printed,
`SystemExit` codes and messages, an uncaught exception's traceback (from the script's frame on) and
status 1, death by SIGINT after an uncaught KeyboardInterrupt, non-daemon threads joined, atexit
handlers run; only the heap's teardown is skipped. The sweep holds the child as a `WarmProcess`: a
pidfd to signal it (SIGTERM: Lightning's graceful stop, as for a plain process) and its exit status,
which the zygote reports. A child dies with its zygote (it could not report how it ended).

Safety. Forking a process that has other threads copies only the forking thread, so a library whose
pool threads vanish in the child can hang there (libgomp, torch's intra-op pool, never tears its pool
down at fork). So the zygote forks once right after its imports and throws the child away: libraries
that stop their pools at fork do so (OpenBLAS, which numpy and scipy start at import, via
`pthread_atfork`); from then on it must have exactly one thread, Python's and the kernel's count alike,
and CUDA must not be initialised, before every fork. torch's intra-op pool has no query that does not
initialise it; initialising it with more than one thread starts its workers, which the kernel's count
shows (with one thread it starts none, and a fork is harmless). A zygote that fails this check, or its
imports, refuses; the sweep then says so once and starts every later run as a fresh process.

The zygote is started in the run's own environment (one per distinct environment, e.g. per thread
count), so every library that reads a variable at load time (libgomp's and OpenBLAS's thread counts,
MKL's) reads the run's value, as in a fresh process. Before each fork it checks that no first-party
source it imported has changed since (a commit or edit during a long sweep); if one has, the sweep
starts a new zygote, so a run executes the code its `git.diff`/`git_commit` record.

Why not `multiprocessing`'s forkserver, which also preloads modules and forks per child (and does pass
file descriptors and exit codes)? Its children run as multiprocessing workers, not as `python cli.py`:
`BaseProcess._bootstrap` prints `Process ForkServerProcess-N:` before a traceback, turns KeyboardInterrupt
into status 1, and leaves through `os._exit` without the atexit handlers a fresh interpreter runs;
there is one forkserver per process, with one environment; its preload ignores ImportError; and no code
of ours runs in it before each fork, where the thread check must run.

    python -m experiments.sweep.warm FD ROOT MODULES     the zygote (started by `Zygote`, never by hand)
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import json
import os
import runpy
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[2]
MODULE = "experiments.sweep.warm"
# what every `cli.py fit` of the suite imports: the CLI (Lightning, jsonargparse, torchmetrics, every
# LightningModule), the DataModules (a class_path imports the package, hence all of them), TensorBoard
PRELOAD = ("cli", "datamodules", "torch.utils.tensorboard")
MAX_REQUEST = 1 << 20
CANCEL_POLL_S = 0.2
PR_SET_PDEATHSIG = 1


# ---------------------------------------------------------------- the sweep's side


class WarmProcess:
    """A run forked by a zygote: the part of `subprocess.Popen` that `Processes` and `tee` use.

    Args:
        pid: the run's process id.
        pidfd: a pidfd of the run (signals reach exactly it, never a later process with its pid).
        status: the socket on which the zygote sends the run's wait status when it ends.
    """

    def __init__(self, pid: int, pidfd: int, status: socket.socket):
        self.pid = pid
        self.returncode: int | None = None
        self.cpu_s: float | None = None  # user + system CPU seconds of the run and the children it waited for
        self._pidfd, self._status = pidfd, status
        self._lock = threading.Lock()  # the run's thread and an interrupted sweep may both wait

    def poll(self) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.wait(0)
        return None

    def wait(self, timeout: float | None = None) -> int:
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise subprocess.TimeoutExpired([str(self.pid)], timeout)
        try:
            if self.returncode is None:
                self._status.settimeout(timeout)
                try:
                    message = self._status.recv(4096)
                except (TimeoutError, BlockingIOError):
                    raise subprocess.TimeoutExpired([str(self.pid)], timeout) from None
                self.returncode = self._exit_code(message)
                self._status.close()
                os.close(self._pidfd)
            return self.returncode
        finally:
            self._lock.release()

    def _exit_code(self, message: bytes) -> int:
        if message:
            ended = json.loads(message)
            self.cpu_s = ended["cpu_s"]
            return os.waitstatus_to_exitcode(ended["status"])
        # the zygote died: the run (killed with it, PR_SET_PDEATHSIG) has no one to report its status
        self.send_signal(signal.SIGKILL)
        select.select([self._pidfd], [], [])  # readable once the process has exited
        return -signal.SIGKILL

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError, OSError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """One warm process, started in `env`, importing `preload` in the background.

    Args:
        env: its environment, which is every run's that it forks.
        preload: the modules it imports.
        root: first-party sources live here (a change to one it imported makes it refuse to fork).
    """

    def __init__(self, env: dict[str, str], preload: tuple[str, ...], root: Path):
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [sys.executable, "-m", MODULE, str(theirs.fileno()), str(root), ",".join(preload)]
        self.proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            pass_fds=[theirs.fileno()],
        )
        theirs.close()
        self._send_lock = threading.Lock()
        self._cancelled = False

    def fork(self, argv: list[str], env: dict[str, str], cwd: str, output: int) -> WarmProcess | dict[str, str]:
        """Asks for one run, its stdout and stderr `output`; waits until it has started.

        Returns:
            The run, or why not: `{"refused": why}` (this zygote will not fork) or `{"stale": why}`
            (code it imported changed: a new zygote will), or `{"cancelled": ""}` after `cancel`.
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        request = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
        try:
            with self._send_lock:
                socket.send_fds(self.control, [request], [output, theirs.fileno()])
        except OSError as err:
            ours.close()
            return {"refused": f"cannot reach the warm process ({err})"}
        finally:
            theirs.close()
        ours.settimeout(CANCEL_POLL_S)  # the reply may wait for the imports: notice a cancel meanwhile
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(ours, 4096, 1)
                break
            except TimeoutError:
                if not self._cancelled:
                    continue
                ours.settimeout(0)  # a last look: a run that started meanwhile is returned (and stopped)
                try:
                    message, fds, _, _ = socket.recv_fds(ours, 4096, 1)
                    break
                except BlockingIOError:
                    ours.close()  # the zygote skips a request whose socket is closed
                    return {"cancelled": ""}
        reply = json.loads(message) if message else None
        if reply and "pid" in reply and fds:
            return WarmProcess(reply["pid"], fds[0], ours)
        ours.close()
        for fd in fds:
            os.close(fd)
        if not reply:  # no answer: it has died
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
            return {"refused": f"the warm process ended (exit status {self.proc.returncode})"}
        return reply

    def cancel(self) -> None:
        """Makes every request still waiting for its reply give up: the zygote will not start them."""
        self._cancelled = True

    def close(self, live: bool) -> None:
        """Ends the zygote: it exits once its runs have (`live`: some may still run; else at once)."""
        self.control.close()
        if not live:
            self.proc.kill()  # nothing of ours runs in it; it may still be importing
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def script_of(argv: list[str]) -> str | None:
    """The script of `[this interpreter, SCRIPT.py, ...]` (the only command a zygote runs), else None."""
    return argv[1] if len(argv) >= 2 and argv[0] == sys.executable and argv[1].endswith(".py") else None


class Warm:
    """Starts runs from warm processes, one per distinct environment, until one refuses: then it says
    why, once, and every later run is a fresh process (`start` returns None).

    Args:
        preload: the modules each zygote imports.
        root: the first-party source tree (see `Zygote`).
    """

    def __init__(self, preload: tuple[str, ...] = PRELOAD, root: Path = ROOT):
        self.preload, self.root = preload, root
        self.off: str | None = None  # why warm starts stopped
        self.restarts: list[str] = []  # why a new zygote imported the code again (a source changed)
        self._zygotes: dict[tuple[tuple[str, str], ...], Zygote] = {}
        self._retired: list[Zygote] = []
        self._runs: list[WarmProcess] = []
        self._lock = threading.Lock()
        self._stopping = False

    def start(self, argv: list[str], env: dict[str, str], cwd: str, output: int) -> WarmProcess | None:
        """Forks `argv` (`python SCRIPT ...`) in `cwd` with `env`, its stdout and stderr `output`; None
        when it should start as a fresh process instead."""
        if not hasattr(os, "pidfd_open") or not os.path.isdir("/proc/self/task"):
            self._turn_off("needs Linux (pidfd_open, /proc)")
        if self.off or self._stopping or script_of(argv) is None:
            return None
        key = tuple(sorted(env.items()))
        for _ in range(2):  # again with a new zygote after a change in the code
            with self._lock:
                zygote = self._zygotes.get(key)
                if zygote is None:
                    zygote = self._zygotes[key] = Zygote(env, self.preload, self.root)
            reply = zygote.fork(argv, env, cwd, output)
            if isinstance(reply, WarmProcess):
                with self._lock:
                    self._runs.append(reply)
                return reply
            if self._stopping:
                return None
            if "stale" not in reply:
                self._turn_off(reply.get("refused", str(reply)))
                return None
            with self._lock:
                if self._zygotes.get(key) is zygote:
                    self._retired.append(self._zygotes.pop(key))
                    self.restarts.append(reply["stale"])
                    print(f"warm start: {reply['stale']}; importing the code again", file=sys.stderr, flush=True)
        return None

    def _turn_off(self, why: str) -> None:
        with self._lock:
            if self.off is not None:
                return
            self.off = why
        print(f"warm start off: {why}; every later run starts as a fresh process", file=sys.stderr, flush=True)

    def stop(self) -> None:
        """The sweep is being interrupted: start nothing more."""
        self._stopping = True
        with self._lock:
            zygotes = [*self._zygotes.values(), *self._retired]
        for zygote in zygotes:
            zygote.cancel()

    def close(self) -> None:
        """Ends every zygote (each once its runs have ended)."""
        with self._lock:
            zygotes, self._zygotes = [*self._zygotes.values(), *self._retired], {}
            self._retired = []
            live = any(run.returncode is None for run in self._runs)
        for zygote in zygotes:
            zygote.close(live)


# ---------------------------------------------------------------- the zygote's side


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


def preload(modules: list[str]) -> tuple[bytes, str | None]:
    """Imports `modules`, capturing what they print. Returns that output and why the imports failed (or None)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 1)
        os.dup2(capture.fileno(), 2)
        try:
            for name in modules:
                importlib.import_module(name)
            failure = None
        except BaseException:  # noqa: BLE001 (any failure, SystemExit included: the runs fall back to fresh processes)
            failure = "importing " + ",".join(modules) + " failed: " + traceback.format_exc().strip().splitlines()[-1]
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)
        capture.seek(0)
        return capture.read(), failure


def first_party_sources(root: str) -> dict[str, tuple[int, int]]:
    """(mtime, size) of every imported module's source file under `root` (the interpreter's own tree excluded)."""
    outside = tuple(os.path.join(p, "") for p in {sys.prefix, sys.base_prefix})
    found = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and path.startswith(os.path.join(root, "")) and not path.startswith(outside):
            with contextlib.suppress(OSError):
                stat = os.stat(path)
                found[path] = (stat.st_mtime_ns, stat.st_size)
    return found


def changed(sources: dict[str, tuple[int, int]]) -> str | None:
    for path, before in sources.items():
        try:
            stat = os.stat(path)
        except OSError:
            return f"{path} was removed"
        if (stat.st_mtime_ns, stat.st_size) != before:
            return f"{path} changed since the warm process imported it"
    return None


def threads() -> int:
    """This process's threads, as the kernel counts them (native pools included)."""
    return len(os.listdir("/proc/self/task"))


def stop_pools_that_stop_at_fork() -> None:
    """A throwaway fork: libraries that stop their thread pools before a fork (OpenBLAS) stop them now."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def fork_hazard() -> str | None:
    """Why forking now is unsafe, or None: another thread exists, or CUDA is initialised."""
    if threading.active_count() != 1:
        return f"{threading.active_count()} Python threads in the warm process (a fork copies only one)"
    if threads() != 1:
        return f"{threads()} threads in the warm process (a native pool, e.g. torch's intra-op pool after an op)"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA was initialised in the warm process"
    return None


def closed(sock: socket.socket) -> bool:
    """Whether the peer of `sock` has gone (the sweep cancelled this request)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def serve(control: socket.socket, root: str, modules: list[str]) -> Job | None:
    """The zygote: imports, then forks one child per request until the sweep closes `control` and every
    child has ended. Returns None there; in each forked child, returns its `Job`."""
    # the sweep ends the zygote by closing `control`; Ctrl-C reaches the runs themselves (the same group)
    dispositions = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in dispositions:
        signal.signal(sig, signal.SIG_IGN)
    banner, failure = preload(modules)
    sources = first_party_sources(root)
    stop_pools_that_stop_at_fork()
    children: dict[int, tuple[int, socket.socket | None]] = {}  # pidfd -> (pid, status socket)
    with selectors.DefaultSelector() as selector:
        selector.register(control, selectors.EVENT_READ)
        open_ = True
        while open_ or children:
            for key, _ in selector.select():
                if key.fileobj is not control:  # a child's pidfd: it has exited
                    pid, status = children.pop(key.fd)
                    selector.unregister(key.fd)
                    _, wait_status, usage = os.wait4(pid, 0)
                    os.close(key.fd)
                    if status is not None:
                        ended = {"status": wait_status, "cpu_s": usage.ru_utime + usage.ru_stime}
                        with contextlib.suppress(OSError):
                            status.send(json.dumps(ended).encode())
                        status.close()
                    continue
                message, fds, _, _ = socket.recv_fds(control, MAX_REQUEST, 2)
                if not message:  # the sweep has closed it
                    selector.unregister(control)
                    open_ = False
                    continue
                output, status = fds[0], socket.socket(fileno=fds[1])
                refusal = failure or fork_hazard()
                stale = None if refusal else changed(sources)
                reply = {"refused": refusal} if refusal else {"stale": stale} if stale else None
                if reply or closed(status):  # closed: the sweep cancelled it
                    with contextlib.suppress(OSError):
                        status.send(json.dumps(reply or {}).encode())
                    status.close()
                    os.close(output)
                    continue
                request, zygote = json.loads(message), os.getpid()
                pid = os.fork()
                if pid == 0:
                    control.close()
                    status.close()
                    for pidfd, (_, other) in children.items():
                        os.close(pidfd)
                        if other is not None:
                            other.close()
                    return Job(request["argv"], request["env"], request["cwd"], output, banner, dispositions, zygote)
                os.close(output)
                pidfd = os.pidfd_open(pid)
                try:
                    socket.send_fds(status, [json.dumps({"pid": pid}).encode()], [pidfd])
                except OSError:  # cancelled meanwhile: no one would supervise the run
                    os.kill(pid, signal.SIGKILL)
                    status.close()
                    status = None
                children[pidfd] = (pid, status)
                selector.register(pidfd, selectors.EVENT_READ)
    return None


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


def main(argv: list[str]) -> int:
    """`python -m experiments.sweep.warm FD ROOT MODULES` (see the module docstring)."""
    control = socket.socket(fileno=int(argv[0]))
    job = serve(control, argv[1], [m for m in argv[2].split(",") if m])
    if job is not None:
        run(job)  # in a forked child: never returns
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
