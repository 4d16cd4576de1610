"""Launchers: what runs the runs a sweep still has to run (`cli.py sweep --launcher`).

- `pool` (default): this process, `--jobs` runs at a time (`experiments.sweep.runner.run_sweep`).
- `local`: submitit's LocalExecutor: each run is a job on this machine, `--jobs` at a time; the sweep
  waits for them, then records and reports as the pool does.
- `slurm`: submitit's SlurmExecutor: the runs as one SLURM job array (one array per resource shape,
  when cells differ in `trainer.devices`/`trainer.num_nodes`); the sweep submits and returns. Running
  the same command again records the runs that finished, and submits again those that did not,
  except runs that are running (claimed) or still queued (`submitted.json` names a pending job).

Every job runs `python -m experiments.sweep.task RUN_JSON` in the repository root (through
`submitit.helpers.CommandFunction`, so the job needs nothing of this package unpickled): the same
`cli.py fit` command, claim and resumption as the pool (`experiments.sweep.task`). Job logs, pickles
and submission scripts go to `DIR/_submitit/`.

A run of `trainer.devices: N` and `trainer.num_nodes: M` gets a job of M nodes with N tasks per node
(one process per device, as Lightning's SLURM guide asks: Lightning reads SLURM_PROCID and the other
SLURM_* variables in each task), `gpus_per_node: N` with a GPU accelerator, and `cpus_per_task` CPUs
(each task's threads). The spec's `launcher:` block adds the rest (partition, time, memory, any sbatch
option).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from contract.run_folder import FAILED
from experiments.sweep.claims import describe, read_claim
from experiments.sweep.commands import Run
from experiments.sweep.ledger import Ledger
from experiments.sweep.resources import GPU_ACCELERATORS, RunShape
from experiments.sweep.runner import (
    CLAIMED,
    SUBMITTED_NAME,
    Books,
    Outcome,
    Progress,
    checkpoint_ok,
    finished_outcome,
    plan,
)
from experiments.sweep.spec import ROOT, SpecError

LAUNCHERS = ("pool", "local", "slurm")
JOBS_DIR = "_submitit"
TASK = ["-m", "experiments.sweep.task"]  # after the interpreter: `python -m experiments.sweep.task RUN_JSON`
SLURM_TIMEOUT_MIN = 24 * 60  # submitit's own default is 5 minutes; set launcher.timeout_min to the partition's limit
LOCAL_TIMEOUT_MIN = 7 * 24 * 60  # a local job is killed at its time limit too (submitit's default: 2 minutes)
POLL_S = 1.0
# a job in one of these states will still run its run: do not submit the run again
QUEUED_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED")
# launcher keys that are submitit's own parameters under another name
RENAMED = {"partition": "slurm_partition"}


def task_function() -> Any:
    """What each job calls: the task module, run in the repository root with the sweep's interpreter."""
    import submitit

    return submitit.helpers.CommandFunction([sys.executable, *TASK], cwd=ROOT, verbose=True)


def slurm_threads(launcher: dict[str, Any], threads: int | None) -> int:
    """Threads of each task of a SLURM run: `--threads`, else the block's `cpus_per_task`, else 1."""
    return threads or launcher.get("cpus_per_task") or 1


def slurm_parameters(launcher: dict[str, Any], shape: RunShape, threads: int, name: str) -> dict[str, Any]:
    """The `submitit.AutoExecutor.update_parameters` of one run's SLURM job.

    Args:
        launcher: the spec's `launcher:` block (validated by `experiments.sweep.spec`).
        shape: the run's devices per node, nodes and accelerator.
        threads: threads of each task (`OMP_NUM_THREADS`): the CPUs each task asks for, unless the
            block sets `cpus_per_task`.
        name: the job name (Lightning ignores SLURM for jobs named `bash` or `interactive`).

    Raises:
        SpecError: the block contradicts the run's shape, or names a parameter submitit does not know.
    """
    tasks = shape.devices if shape.devices is not None else launcher.get("tasks_per_node")
    if tasks is None:
        if shape.accelerator != "cpu":
            raise SpecError(
                "--launcher slurm starts one task per device: set trainer.devices to a number "
                "(or launcher.tasks_per_node) instead of 'auto'/-1"
            )
        tasks = 1
    for key, needed in (("tasks_per_node", tasks), ("nodes", shape.nodes)):
        if launcher.get(key, needed) != needed:
            raise SpecError(
                f"launcher.{key}: {launcher[key]}, but the runs need {needed} "
                "(one task per device of trainer.devices, on trainer.num_nodes nodes)"
            )
    params: dict[str, Any] = {
        "name": name,
        "nodes": shape.nodes,
        "tasks_per_node": tasks,
        "cpus_per_task": launcher.get("cpus_per_task", threads),
        "timeout_min": launcher.get("timeout_min", SLURM_TIMEOUT_MIN),
    }
    gpus = launcher.get("gpus_per_node", tasks if shape.accelerator in GPU_ACCELERATORS else 0)
    if shape.accelerator in GPU_ACCELERATORS and gpus < tasks:
        raise SpecError(f"launcher.gpus_per_node: {gpus}, but each node runs {tasks} GPU processes")
    if gpus:
        params["gpus_per_node"] = gpus
    if "mem_gb" in launcher:
        params["mem_gb"] = launcher["mem_gb"]
    for key, value in launcher.items():
        key = RENAMED.get(key, key)
        if key.startswith("slurm_"):
            params[key] = value
    _check_slurm_keys(params)
    return params


def _check_slurm_keys(params: dict[str, Any]) -> None:
    import submitit

    valid = submitit.SlurmExecutor._valid_parameters()  # the sbatch options submitit can write
    unknown = [key for key in params if key.startswith("slurm_") and key[len("slurm_") :] not in valid]
    if unknown:
        raise SpecError(
            f"launcher: submitit's SlurmExecutor has no parameter(s) {[k[len('slurm_'):] for k in unknown]}; "
            f"valid: {sorted(valid)} (prefixed slurm_), or any sbatch option in slurm_additional_parameters"
        )


def _pending(runs: list[Run], ledger: Ledger, retry_failed: bool, books: Books) -> list[Run]:
    """Records what ended, reports what others run, and returns the runs to submit."""
    actions = {run: plan(run, ledger, retry_failed) for run in runs}
    books.collect(actions)
    pending = []
    for run, action in actions.items():
        if action not in ("resume", "start"):
            continue
        holder = read_claim(run.dir)
        if holder is not None:
            books.record(run, Outcome(CLAIMED, describe(holder)))
        else:
            pending.append(run)
    return pending


def _job_verdict(job: Any) -> dict[str, Any]:
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
    verdict = _job_verdict(job)
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
    launcher: dict[str, Any],
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

    progress = Progress(len(runs), sum(plan(r, ledger, retry_failed) == "skip" for r in runs), jobs)
    books = Books(ledger, axis_values, progress)
    pending = _pending(runs, ledger, retry_failed, books)
    if not pending:
        progress.say("nothing to run")
        return books.claimed
    executor = submitit.AutoExecutor(folder=out_dir / JOBS_DIR, cluster="local")
    executor.update_parameters(
        timeout_min=launcher.get("timeout_min", LOCAL_TIMEOUT_MIN),
        gpus_per_node=launcher.get("gpus_per_node", local_gpus()),
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


def job_state(folder: str, job_id: str) -> str:
    """A SLURM job's state from sacct (submitit's watcher); UNKNOWN when it cannot tell."""
    import submitit

    return submitit.SlurmJob(folder=folder, job_id=job_id).state


def queued_job(run: Run) -> str | None:
    """The SLURM job the run was submitted to, if that job is still queued or running."""
    try:
        marker = json.loads((run.dir / SUBMITTED_NAME).read_text())
        state = job_state(marker["folder"], marker["job"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return marker["job"] if state.split(" ")[0].upper() in QUEUED_STATES else None


def submit_slurm(
    runs: list[Run],
    ledger: Ledger,
    axis_values: dict[str, dict[str, Any]],
    parameters: dict[str, dict[str, Any]],
    retry_failed: bool,
    out_dir: Path,
) -> tuple[list[tuple[Run, str]], int]:
    """Records what ended, then submits every run still to do as SLURM job arrays, and returns.

    Args:
        runs: all runs, in order.
        ledger: `results.csv`.
        axis_values: each cell's value of every axis key (ledger columns).
        parameters: each cell's job parameters (`slurm_parameters`), by cell name.
        retry_failed: submit the runs recorded as failed again.
        out_dir: the sweep's folder; job logs go to `out_dir/_submitit`.

    Returns:
        The runs left to other processes (claimed), and how many runs were submitted.
    """
    import submitit

    progress = Progress(len(runs), sum(plan(r, ledger, retry_failed) == "skip" for r in runs), 1)
    books = Books(ledger, axis_values, progress)
    groups: dict[str, list[Run]] = {}
    for run in _pending(runs, ledger, retry_failed, books):
        job = queued_job(run)
        if job is not None:
            progress.skipped(run, f"queued as SLURM job {job}")
            continue
        groups.setdefault(json.dumps(parameters[run.cell], sort_keys=True), []).append(run)
    folder = out_dir / JOBS_DIR
    submitted = 0
    for key, group in groups.items():
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
        executor.update_parameters(**json.loads(key))
        jobs = executor.map_array(task_function(), [run.to_json() for run in group])
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        for run, job in zip(group, jobs):
            run.dir.mkdir(parents=True, exist_ok=True)
            marker = {"job": job.job_id, "folder": str(folder), "submitted": stamp}
            (run.dir / SUBMITTED_NAME).write_text(json.dumps(marker))
        array = jobs[0].job_id.split("_")[0]
        shown = ", ".join(f"{k}={v}" for k, v in json.loads(key).items() if k != "name")
        print(f"submitted {len(group)} run(s) as SLURM job {array} ({shown})")
        for run, job in zip(group, jobs):
            print(f"  {job.job_id:>12}  {run.name}")
        submitted += len(group)
    if submitted:
        print(f"job logs: {folder}; run the same command again to record the runs that finished")
    return books.claimed, submitted
