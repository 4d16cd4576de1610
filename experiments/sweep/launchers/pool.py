"""`--launcher pool` (the default): this process brings the runs to an end, `--jobs` at a time, each forked
from a warm process (`experiments.sweep.warm`) or started as a fresh interpreter."""

from __future__ import annotations

import concurrent.futures as cf
import threading
from typing import Any

from contract.disk import DiskFull, disk_full, disk_full_line, free_space, says_disk_full, written_path
from contract.run_folder import FAILED
from experiments.records.ledger import Ledger
from experiments.sweep.claims import Claimed, acquire
from experiments.sweep.launchers.base import Launch, Launched, OnThisMachine
from experiments.sweep.processes import Processes
from experiments.sweep.recording import Progress, Recorder
from experiments.sweep.runner import CLAIMED, RECORDED, Outcome, execute, finished_outcome, plan
from experiments.sweep.runs import Run
from experiments.sweep.warm import Warm


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


def run_pool(
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
    progress = Progress(runs, ledger, retry_failed, jobs)
    books = Recorder(ledger, axis_values, progress)
    procs = Processes(Warm() if warm else None)

    slots = threading.Semaphore(jobs)  # a run starts once the run before it in its slot has been recorded

    def work(run: Run) -> tuple[Run, Outcome | None, float | None]:
        slots.acquire()
        if procs.stopping:
            return run, None, None
        try:
            ended = run, *run_claimed(run, ledger, retry_failed, jobs == 1, procs, progress)
        except OSError as err:  # a write of the sweep's own for the run (its claim, its folder)
            if disk_full(err) is None:
                raise
            ended = run, Outcome(FAILED, disk_full_line(err)), None
        return ended if not procs.stopping else (run, None, None)  # stopped: resumed by the next command

    books.collect(actions)
    pending = [run for run, action in actions.items() if action in ("resume", "start")]
    if not pending:
        progress.say("nothing to run")
        return books.claimed
    pool = cf.ThreadPoolExecutor(max_workers=jobs)
    full: DiskFull | None = None
    try:
        futures = [pool.submit(work, run) for run in pending]
        for future in cf.as_completed(futures):
            run, result, started = future.result()
            try:
                if result is not None:
                    books.record(run, result, started)  # here only: one thread writes the ledger
            except OSError as err:
                if disk_full(err) is None:
                    raise
                full = full or stopped_by(run, err)
            if full is None and result is not None and result.status == FAILED and says_disk_full(result.error):
                full = stopped_by(run, None)
            if full is not None and not procs.stopping:  # no more runs into a full disk; those running stop
                procs.stop()
            slots.release()
    except KeyboardInterrupt:
        # unfinished runs stay unrecorded: the next invocation resumes them from their checkpoints
        progress.say("interrupted: stopping the runs in progress; run the same command again to resume")
        pool.shutdown(wait=False, cancel_futures=True)
        procs.stop()
        raise
    finally:
        for _ in range(jobs):  # no run waits for a slot any more
            slots.release()
        pool.shutdown(wait=True, cancel_futures=True)
        if procs.warm is not None:
            procs.warm.close()
    if full is not None:
        raise full
    return books.claimed


def stopped_by(run: Run, err: OSError | None) -> DiskFull:
    """The sweep's one line when a full disk stops it at `run` (`err`: the sweep's own write that failed)."""
    path = written_path(err) if err is not None else str(run.dir)
    return DiskFull(
        path,
        f"error: no space left on device: the sweep stopped at {run.name}, writing {path} "
        f"({free_space(path)} free there); free space on that disk and run the same command "
        "again: the runs that ended are kept and the rest resume from their last checkpoints",
    )


class Pool(OnThisMachine):
    name = "pool"
    help = "this process runs them"

    def launch(self, launch: Launch) -> Launched:
        runs, ledger = launch.runs, launch.ledger
        return Launched(run_pool(runs, ledger, launch.axis_values, launch.jobs, launch.retry_failed, launch.warm))
