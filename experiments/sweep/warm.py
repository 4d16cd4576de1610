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

Three modules, one per side: this one is the sweep's (`Warm`, `Zygote`, `WarmProcess`); the zygote is
`experiments.sweep.zygote` (`python -m experiments.sweep.zygote FD ROOT MODULES`, started by `Zygote`,
never by hand); what a forked child runs is `experiments.sweep.warm_child`.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ZYGOTE_MODULE = "experiments.sweep.zygote"
# what every `cli.py fit` of the suite imports, named rather than `cli` (nothing below the entry point imports
# it): the CLI class cli.py imports (torch, Lightning, jsonargparse, torchmetrics, every LightningModule), the
# DataModules (a class_path imports the package, hence all of them), TensorBoard. test_warm.py checks that
# importing cli.py afterwards loads nothing more
PRELOAD = ("lit_modules.suite_cli", "datamodules", "torch.utils.tensorboard")
CANCEL_POLL_S = 0.2


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
        command = [sys.executable, "-m", ZYGOTE_MODULE, str(theirs.fileno()), str(root), ",".join(preload)]
        self.proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
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
