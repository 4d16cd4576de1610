"""Claims: each run is trained by one process at a time, however many sweeps share its folder.

Before a run starts, whoever starts it (a sweep's thread pool, or a SLURM/local job of the `slurm`
and `local` launchers) creates `DIR/<cell>/seed<k>/claim.json` with O_CREAT|O_EXCL, which is atomic
(also on NFS v3 and later): of two launchers, exactly one gets the file. It holds who runs the run
(host, pid, the process's start time, when the claim was taken, a random token, the job id under a
scheduler). While the run lives its holder touches the file every `HEARTBEAT_S` seconds; when the run
ends the holder removes it (in a `finally`).

A claim that exists is respected (the run is skipped by this launcher: "claimed by host:pid, running
since ...") unless it is stale:

- on this host (same hostname and PID namespace): its process is gone (no such pid, or a pid reused
  by a process that started at another time);
- from another host: its heartbeat (the file's modification time) is older than `STALE_AFTER_S`
  (15 minutes: a killed machine or job; generous, so clock skew between hosts does not matter);
- unreadable (a holder killed between creating and writing the file) and older than `WRITE_GRACE_S`.

The holder is the process that starts the run's `cli.py fit` and waits for it: the sweep (pool
launcher) or the job's task (`experiments.sweep.task`). Killing the holder alone with SIGKILL (not its
process group) makes the claim stale while its run's process may go on until it fails to write its
output to the gone pipe: a takeover in that window trains the run twice at once.

A stale claim is taken over one taker at a time: a taker creates `claim.json.takeover` (O_EXCL: a
mutex held for milliseconds), reads the claim again, removes it only if it is still the one judged
stale, removes the mutex, and tries the O_EXCL creation again; of several takers exactly one creates
the new claim. (A taker killed while holding the mutex leaves it; it is removed after `WRITE_GRACE_S`.)
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Any

from contract.files import write_atomic

CLAIM_NAME = "claim.json"
HEARTBEAT_S = 60.0
STALE_AFTER_S = 15 * 60.0
WRITE_GRACE_S = 60.0
JOB_VARS = ("SLURM_JOB_ID", "SUBMITIT_LOCAL_JOB_ID")  # the scheduler job a process runs in, if any


class Claimed(Exception):
    """The run is claimed by a live process elsewhere.

    Args:
        holder: the claim's contents (host, pid, started, ...); {} when unreadable.
    """

    def __init__(self, holder: dict[str, Any]):
        super().__init__(describe(holder))
        self.holder = holder


def describe(holder: dict[str, Any]) -> str:
    """`claimed by host:pid, running since 2025-01-01 12:00:00 (job 42)`."""
    job = f" (job {holder['job']})" if holder.get("job") else ""
    since = holder.get("started", "?")
    return f"claimed by {holder.get('host', '?')}:{holder.get('pid', '?')}, running since {since}{job}"


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")  # containers on one host share its hostname, not its pids
    except OSError:
        return ""


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid from its holder."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()[19]  # field 22; the command name may contain spaces


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def identity(job: str | None = None) -> dict[str, Any]:
    """What a new claim holds about this process."""
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "pid_namespace": _pid_namespace(),
        "process_start": _process_start(pid),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "token": secrets.token_hex(8),
        "job": job if job is not None else next((os.environ[v] for v in JOB_VARS if os.environ.get(v)), None),
    }


def is_stale(holder: dict[str, Any], age_s: float) -> bool:
    """Whether a claim's holder is gone.

    Args:
        holder: the claim's contents; {} when it could not be read.
        age_s: seconds since the claim file was last touched (its heartbeat).
    """
    if not holder:
        return age_s > WRITE_GRACE_S
    here = holder.get("host") == socket.gethostname() and holder.get("pid_namespace", "") == _pid_namespace()
    if not here:
        return age_s > STALE_AFTER_S
    pid = holder.get("pid")
    if not isinstance(pid, int) or not _pid_alive(pid):
        return True
    started = holder.get("process_start")
    return started is not None and _process_start(pid) not in (None, started)


def _read(path: Path) -> tuple[bytes, dict[str, Any], float] | None:
    """The claim's raw bytes, contents ({} if not JSON yet) and age in seconds; None if there is none."""
    try:
        raw = path.read_bytes()
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None
    try:
        holder = json.loads(raw)
    except ValueError:
        holder = {}
    return raw, holder if isinstance(holder, dict) else {}, age


def read_claim(run_dir: Path) -> dict[str, Any] | None:
    """The run's current claim if there is one and it is not stale (so the run is running elsewhere)."""
    found = _read(run_dir / CLAIM_NAME)
    if found is None or is_stale(found[1], found[2]):
        return None
    return found[1] or {"host": "?", "pid": "?", "started": "just now"}


def _remove_stale(path: Path, seen: bytes) -> None:
    """Removes the claim judged stale (`seen`), holding the takeover mutex, unless it changed meanwhile."""
    mutex = path.with_name(f"{path.name}.takeover")
    try:
        os.close(os.open(mutex, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        try:
            age = time.time() - mutex.stat().st_mtime
        except FileNotFoundError:
            return
        if age > WRITE_GRACE_S:  # its taker died in the middle
            mutex.unlink(missing_ok=True)
        else:  # another taker is at it: its claim will be there in a moment
            time.sleep(0.05)
        return
    try:
        try:
            if path.read_bytes() == seen:  # only creation can replace a removed claim, never removal
                path.unlink()
        except FileNotFoundError:
            pass
    finally:
        mutex.unlink(missing_ok=True)


class Claim:
    """A claim this process holds; a context manager that keeps its heartbeat and releases it.

    Args:
        path: `DIR/<cell>/seed<k>/claim.json`.
        info: what the file holds.
    """

    def __init__(self, path: Path, info: dict[str, Any]):
        self.path, self.info = path, info
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def ours(self) -> bool:
        found = _read(self.path)
        return found is not None and found[1].get("token") == self.info["token"]

    def update(self, **fields: Any) -> None:
        """Adds fields to the claim (atomically: readers see the old or the new file)."""
        self.info |= fields
        write_atomic(self.path, json.dumps(self.info))

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S) and self.ours():  # never keep another holder's claim alive
            try:
                os.utime(self.path)
            except OSError:
                pass

    def release(self) -> None:
        """Removes the claim if it is still ours (never another holder's)."""
        self._stop.set()
        if self.ours():
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> Claim:
        self._beat = threading.Thread(target=self._heartbeat, name=f"claim {self.path.parent}", daemon=True)
        self._beat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(run_dir: Path, job: str | None = None, attempts: int = 20, stale_job: str | None = None) -> Claim:
    """Claims a run, taking over a stale claim.

    Args:
        run_dir: `DIR/<cell>/seed<k>` (created if missing).
        job: the scheduler job this process runs in (default: from SLURM_JOB_ID / SUBMITIT_LOCAL_JOB_ID).
        attempts: creations to try while stale claims are being replaced.
        stale_job: a claim of this job is stale: the job was requeued, and its earlier run, gone, left it (a
            holder on another host looks alive for `STALE_AFTER_S`).

    Raises:
        Claimed: the run is claimed by a live process.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / CLAIM_NAME
    info = identity(job)
    holder: dict[str, Any] = {}
    for _ in range(attempts):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            found = _read(path)
            if found is None:  # released meanwhile
                continue
            raw, holder, age = found
            if not is_stale(holder, age) and not (stale_job and holder.get("job") == stale_job):
                raise Claimed(holder) from None
            _remove_stale(path, raw)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(info))
        return Claim(path, info)
    raise Claimed(holder)
