"""`--launcher local`: submitit's LocalExecutor: each run is a job on this machine, `--jobs` at a time; the
sweep waits for them, then records and reports as the pool does."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from contract.run_folder import FAILED
from experiments.records.ledger import Ledger
from experiments.sweep.launchers.base import Launch, Launched, OnThisMachine
from experiments.sweep.launchers.jobs import JOBS_DIR, pending_runs, task_function
from experiments.sweep.recording import Progress, Recorder
from experiments.sweep.runner import CLAIMED, Outcome, checkpoint_ok, finished_outcome
from experiments.sweep.runs import Run
from experiments.sweep.spec_blocks import LauncherOptions

LOCAL_TIMEOUT_MIN = 7 * 24 * 60  # a local job is killed at its time limit too (submitit's default: 2 minutes)
POLL_S = 1.0


def job_verdict(job: Any) -> dict[str, Any]:
    """The task's verdict (its last JSON line: the job's output, or its error when it failed), else the
    job's error as a failed verdict."""
    error = job.exception()
    text = str(job.result()) if error is None else str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                return json.loads(line)
    return {"status": FAILED, "note": lines[-1] if lines else type(error).__name__} if error else {}


def local_outcome(run: Run, job: Any) -> Outcome | None:
    """How a finished local job left its run: its folder first (run.json, outcome.json), then its
    verdict; None when the job was interrupted (the run stays unrecorded, to be resumed)."""
    found = finished_outcome(run)
    if found is not None:
        return found
    verdict = job_verdict(job)
    if verdict.get("status") == "interrupted":
        return None
    if verdict.get("status") == CLAIMED:
        return Outcome(CLAIMED, verdict.get("note", ""))
    note = verdict.get("note") or f"the job ended without an outcome; see its log in {job.paths.stdout}"
    return Outcome(FAILED, note)


def local_gpus() -> int:
    """GPUs a local job sees by default: all of this machine's (as a pool run does)."""
    import torch

    return torch.cuda.device_count()


def run_local(
    runs: list[Run],
    ledger: Ledger,
    axis_values: dict[str, dict[str, Any]],
    jobs: int,
    retry_failed: bool,
    launcher: LauncherOptions,
    out_dir: Path,
) -> list[tuple[Run, str]]:
    """Runs the runs as submitit LocalExecutor jobs, `jobs` at a time, and records each as it ends.

    Args:
        runs: all runs, in order.
        ledger: `results.csv`.
        axis_values: each cell's value of every axis key (ledger columns).
        jobs: jobs at a time.
        retry_failed: run the runs recorded as failed again.
        launcher: the spec's `launcher:` block (`timeout_min`, `gpus_per_node` apply here).
        out_dir: the sweep's folder; job logs go to `out_dir/_submitit`.

    Returns:
        The runs left to other processes (claimed), each with its claim's description.
    """
    import submitit

    progress = Progress(runs, ledger, retry_failed, jobs)
    books = Recorder(ledger, axis_values, progress)
    pending = pending_runs(runs, ledger, retry_failed, books)
    if not pending:
        progress.say("nothing to run")
        return books.claimed
    executor = submitit.AutoExecutor(folder=out_dir / JOBS_DIR, cluster="local")
    executor.update_parameters(
        timeout_min=launcher.timeout_min or LOCAL_TIMEOUT_MIN,
        gpus_per_node=local_gpus() if launcher.gpus_per_node is None else launcher.gpus_per_node,
    )
    running: dict[Any, tuple[Run, float]] = {}
    try:
        while pending or running:
            while pending and len(running) < jobs:
                run = pending.pop(0)
                started = progress.started(run, "resume" if checkpoint_ok(run) else "start")
                running[executor.submit(task_function(), run.to_json())] = (run, started)
            time.sleep(POLL_S)
            for job in [job for job in running if job.done()]:
                run, started = running.pop(job)
                result = local_outcome(run, job)
                if result is None:
                    progress.skipped(run, "its job was interrupted; the next invocation resumes it")
                else:
                    books.record(run, result, started)
    except KeyboardInterrupt:
        progress.say("interrupted: stopping the jobs in progress; run the same command again to resume")
        for job in running:
            job.cancel()  # each task stops its run and releases its claim
        raise
    return books.claimed


class Local(OnThisMachine):
    name = "local"
    help = "submitit jobs on this machine (waits)"

    def launch(self, launch: Launch) -> Launched:
        return Launched(
            run_local(
                launch.runs,
                launch.ledger,
                launch.axis_values,
                launch.jobs,
                launch.retry_failed,
                launch.block,
                launch.out_dir,
            )  # fmt: skip
        )
