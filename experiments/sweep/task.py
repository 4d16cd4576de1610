"""`python -m experiments.sweep.task RUN_JSON`: one run of a sweep inside a scheduler job (the `local` and
`slurm` launchers submit this command; `RUN_JSON` is `Run.to_json()`).

It runs exactly the `cli.py fit` command the pool would run, with the same claim, resumption and log:

- the job's first task (SLURM_PROCID 0) claims the run (`experiments.sweep.claims`); a run claimed by a
  live process elsewhere is not run. It resumes from `checkpoints/last.ckpt` when there is one, else
  starts over, and notes that choice in the claim; a failed attempt leaves `outcome.json` for the
  sweep that records it. Exit status 0 when the run ended done or diverged (or was not this job's to
  run), 1 when it failed, 130 when interrupted (SIGTERM, SIGUSR2 before a time limit, SIGINT): an
  interrupted run stays unrecorded, and the next `cli.py sweep` resumes it. Warned of its SLURM job's time limit
  (SIGUSR2), it leaves `submitted.json` naming the job, which submitit requeues (`experiments.sweep.requeue`),
  before it releases the claim; the requeued job (the same job id) takes over a claim its earlier run left.
- every further task of a multi-node run (SLURM_PROCID k > 0; Lightning makes each task one DDP
  process from SLURM_* variables) waits until the first task's claim names this job and its choice,
  then runs the same command, logging to `rank<k>.log`; it gives up after `FOLLOW_TIMEOUT_S` (the
  first task found the run claimed elsewhere or finished).

The last line of its output is a JSON verdict (`{"run": ..., "status": ..., "note": ...}`; status done,
diverged, failed, claimed or interrupted) for the launcher that waits for it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from types import FrameType

from contract.files import write_json_atomic
from contract.run_folder import FINISHED, RUN_LOG
from experiments.sweep.claims import Claimed, acquire, read_claim
from experiments.sweep.processes import Processes, terminate_as_interrupt
from experiments.sweep.runner import (
    CLAIMED,
    SUBMITTED_NAME,
    attempt,
    checkpoint_ok,
    finished_outcome,
    prepare,
    write_outcome,
)
from experiments.sweep.runs import Run

FOLLOW_TIMEOUT_S = 300.0
INTERRUPTED = 130
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """SIGTERM when the parent (submitit's task process) dies, e.g. when a local job is cancelled: a
    run left training without its job would keep a claim nobody waits for (Linux only)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class TimeLimitWarning(KeyboardInterrupt):
    """SIGUSR2: submitit's warning that the SLURM job nears its time limit (or is preempted)."""


@contextlib.contextmanager
def time_limit_warning() -> Iterator[None]:
    """SIGUSR2 raises `TimeLimitWarning`, an interrupt that the job's requeue follows."""

    def warned(signum: int, frame: FrameType | None) -> None:
        raise TimeLimitWarning

    previous = signal.signal(signal.SIGUSR2, warned)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR2, previous)


def slurm_job() -> str | None:
    """This SLURM job as `submit_slurm` names it (`<array>_<index>` in an array), None outside SLURM."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "slurm":
        return None
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    return f"{array}_{os.environ.get('SLURM_ARRAY_TASK_ID')}" if array else os.environ.get("SLURM_JOB_ID")


def leave_requeued(run: Run) -> None:
    """Marks the warned run as queued in its job, which submitit requeues: a sweep run before the requeued job
    claims it sees it queued (`experiments.sweep.launchers.slurm.queued_job`) and neither records nor submits
    it; if the job is not requeued after all (it timed out too often), the marker names an ended job and the
    next sweep submits the run again."""
    job = slurm_job()
    if job is None:
        return
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    marker = {"job": job, "folder": os.environ.get("SUBMITIT_FOLDER", ""), "submitted": stamp, "requeued": True}
    write_json_atomic(run.dir / SUBMITTED_NAME, marker)
    with (run.dir / RUN_LOG).open("a") as log:
        log.write(f"\n=== {stamp} time limit: SLURM job {job} warned; the run stopped at its checkpoint, to resume\n")


def _verdict(run: Run, status: str, note: str = "") -> None:
    """The last output line; also on stderr, which is what a failed job's error carries back."""
    line = json.dumps({"run": run.name, "status": status, "note": note})
    print(line, flush=True)
    if status not in (*FINISHED, CLAIMED):
        print(line, file=sys.stderr, flush=True)


def lead(run: Run, job: str | None, procs: Processes) -> int:
    """The first task: claim, choose start or resume, run, leave the outcome."""
    restarted = os.environ.get("SLURM_RESTART_COUNT", "0") != "0"  # this job was requeued: its claim is stale
    try:
        claim = acquire(run.dir, job=job, stale_job=job if restarted else None)
    except Claimed as held:
        _verdict(run, CLAIMED, str(held))
        return 0
    with claim:
        found = finished_outcome(run)
        if found is not None and found.status in FINISHED:  # an earlier job finished it: nothing to do
            claim.update(action="finished")
            _verdict(run, found.status, "finished before this job")
            return 0
        action = "resume" if checkpoint_ok(run) else "start"
        prepare(run, action)
        claim.update(action=action)  # the other tasks of a multi-node run start now
        try:
            result = attempt(run, action, echo=False, procs=procs)
        except KeyboardInterrupt as stop:
            procs.stop()  # before the claim goes: no one may start the run while it still trains
            if not isinstance(stop, TimeLimitWarning):
                raise
            result = finished_outcome(run)  # a warning as the run ended: nothing to requeue
            if result is None or result.status not in FINISHED:
                leave_requeued(run)
                raise
        if result.status not in FINISHED:
            write_outcome(run, result)
    _verdict(run, result.status, result.error)
    return 0 if result.status in FINISHED else 1


def follow(run: Run, rank: int, job: str | None, procs: Processes) -> int:
    """A further task of a multi-node run: the same command as the first task, once it has started."""
    deadline = time.monotonic() + FOLLOW_TIMEOUT_S
    while True:
        holder = read_claim(run.dir)
        if holder and job and holder.get("job") == job and holder.get("action"):
            break
        if time.monotonic() > deadline:
            _verdict(run, CLAIMED, f"task {rank}: the first task of job {job} did not start the run")
            return 0
        time.sleep(1.0)
    if holder["action"] == "finished":
        return 0
    result = attempt(run, holder["action"], echo=False, procs=procs, log_name=f"rank{rank}.log")
    return 0 if result.status in FINISHED else 1


def task_rank_and_job() -> tuple[int, str | None]:
    """This task's global rank and its job's id, from the variables of the executor that started it
    (a local job started inside a SLURM allocation also sees SLURM_*, which are not its own)."""
    if os.environ.get("SUBMITIT_EXECUTOR") == "slurm":
        return int(os.environ.get("SLURM_PROCID", "0")), os.environ.get("SLURM_JOB_ID")
    return int(os.environ.get("SUBMITIT_LOCAL_GLOBALID", "0")), os.environ.get("SUBMITIT_LOCAL_JOB_ID")


def main(argv: list[str]) -> int:
    """Runs one run (see the module docstring). Returns the exit status."""
    run = Run.from_json(argv[0])
    rank, job = task_rank_and_job()
    _die_with_parent()
    procs = Processes()
    try:
        with terminate_as_interrupt(signal.SIGTERM), time_limit_warning():
            return lead(run, job, procs) if rank == 0 else follow(run, rank, job, procs)
    except KeyboardInterrupt:
        procs.stop()
        _verdict(run, "interrupted", "the next `cli.py sweep` resumes it from its last checkpoint")
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
