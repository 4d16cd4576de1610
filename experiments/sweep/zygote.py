"""The warm process (the "zygote") of `experiments.sweep.warm`: imports the suite once, then forks one
child per run the sweep asks for, checking before each fork that forking is safe and the code unchanged.

    python -m experiments.sweep.zygote FD ROOT MODULES     (started by `warm.Zygote`, never by hand)
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import tempfile
import threading
import traceback

from experiments.sweep.warm_child import Job, run

MAX_REQUEST = 1 << 20


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


def main(argv: list[str]) -> int:
    """`python -m experiments.sweep.zygote FD ROOT MODULES` (see the module docstring)."""
    control = socket.socket(fileno=int(argv[0]))
    job = serve(control, argv[1], [m for m in argv[2].split(",") if m])
    if job is not None:
        run(job)  # in a forked child: never returns
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
