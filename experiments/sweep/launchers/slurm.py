"""`--launcher slurm`: submitit's SlurmExecutor: the runs as one SLURM job array (one array per resource
shape, when cells differ in `trainer.devices`/`trainer.num_nodes`); the sweep submits and returns. Running
the same command again records the runs that finished, and submits again those that did not, except runs
that are running (claimed) or still queued (`submitted.json` names a pending job).

A run of `trainer.devices: N` and `trainer.num_nodes: M` gets a job of M nodes with N tasks per node
(one process per device, as Lightning's SLURM guide asks: Lightning reads SLURM_PROCID and the other
SLURM_* variables in each task), `gpus_per_node: N` with a GPU accelerator, and `cpus_per_task` CPUs
(each task's threads). The spec's `launcher:` block adds the rest (partition, time, memory, any sbatch
option).

A run longer than the job's time limit is requeued (`experiments.sweep.requeue`): warned `slurm_signal_delay_s`
before the limit (default: 90 s, a quarter of a limit under 6 minutes), it saves its checkpoint, and the job is
requeued, at most `slurm_max_num_timeout` times (default `SLURM_MAX_REQUEUES`), and resumes it.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.records.ledger import Ledger
from experiments.sweep.launchers.base import Launch, Launched
from experiments.sweep.launchers.jobs import JOBS_DIR, pending_runs, task_function
from experiments.sweep.recording import Progress, Recorder
from experiments.sweep.resources import GPU_ACCELERATORS, RunShape
from experiments.sweep.runner import SUBMITTED_NAME
from experiments.sweep.runs import Run
from experiments.sweep.spec import ROOT, Spec, SpecError
from experiments.sweep.spec_blocks import LauncherOptions

if TYPE_CHECKING:  # validate imports Lightning: a scheduler job must not
    from experiments.sweep.validate import CheckedCell

SLURM_TIMEOUT_MIN = 24 * 60  # submitit's own default is 5 minutes; set launcher.timeout_min to the partition's limit
SLURM_MAX_REQUEUES = 10  # submitit's default is 3: a run of a few time limits would end unfinished
MAX_SIGNAL_DELAY_S = 90  # submitit's default warning, for limits of 6 minutes and more
# a job in one of these states will still run its run: do not submit the run again
QUEUED_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED")


def slurm_threads(launcher: LauncherOptions, threads: int | None) -> int:
    """Threads of each task of a SLURM run: `--threads`, else the block's `cpus_per_task`, else 1."""
    return threads or launcher.cpus_per_task or 1


def signal_delay_s(timeout_min: int) -> int:
    """The warning before the time limit: submitit's 90 s, or a quarter of a shorter limit (a job of 1 minute is
    warned 15 s before; SLURM may send it up to ~30 s earlier still, the resolution of its event loop)."""
    return min(MAX_SIGNAL_DELAY_S, max(10, timeout_min * 60 // 4))


def slurm_parameters(launcher: LauncherOptions, shape: RunShape, threads: int, name: str) -> dict[str, Any]:
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
    tasks = shape.devices if shape.devices is not None else launcher.tasks_per_node
    if tasks is None:
        if shape.accelerator != "cpu":
            raise SpecError(
                f"--launcher slurm starts one task per device, and trainer.devices 'auto' with trainer.accelerator "
                f"{shape.accelerator!r} cannot be counted before the job meets its node: set trainer.devices to a "
                "number (or launcher.tasks_per_node), or trainer.accelerator: cpu (one task per run)"
            )
        tasks = 1
    given = {"tasks_per_node": launcher.tasks_per_node, "nodes": launcher.nodes}
    for key, needed in (("tasks_per_node", tasks), ("nodes", shape.nodes)):
        if given[key] not in (None, needed):
            raise SpecError(
                f"launcher.{key}: {given[key]}, but the runs need {needed} "
                "(one task per device of trainer.devices, on trainer.num_nodes nodes)"
            )
    params: dict[str, Any] = {
        "name": name,
        "nodes": shape.nodes,
        "tasks_per_node": tasks,
        "cpus_per_task": launcher.cpus_per_task or threads,
        "timeout_min": launcher.timeout_min or SLURM_TIMEOUT_MIN,
    }
    gpus = launcher.gpus_per_node
    gpus = (tasks if shape.accelerator in GPU_ACCELERATORS else 0) if gpus is None else gpus
    if shape.accelerator in GPU_ACCELERATORS and gpus < tasks:
        raise SpecError(f"launcher.gpus_per_node: {gpus}, but each node runs {tasks} GPU processes")
    if gpus:
        params["gpus_per_node"] = gpus
    if launcher.mem_gb is not None:
        params["mem_gb"] = launcher.mem_gb
    params |= launcher.slurm()
    params.setdefault("slurm_signal_delay_s", signal_delay_s(params["timeout_min"]))
    params.setdefault("slurm_max_num_timeout", SLURM_MAX_REQUEUES)
    _check_slurm_keys(params)
    return params


def _check_slurm_keys(params: dict[str, Any]) -> None:
    import submitit

    valid = submitit.SlurmExecutor._valid_parameters()  # the sbatch options submitit can write
    valid |= {"max_num_timeout"}  # the executor's own, not an sbatch option (`submit_slurm`)
    unknown = [key for key in params if key.startswith("slurm_") and key[len("slurm_") :] not in valid]
    if unknown:
        raise SpecError(
            f"launcher: submitit's SlurmExecutor has no parameter(s) {[k[len('slurm_') :] for k in unknown]}; "
            f"valid: {sorted(valid)} (prefixed slurm_), or any sbatch option in slurm_additional_parameters"
        )


def job_state(folder: str, job_id: str) -> str:
    """A SLURM job's state from sacct (submitit's watcher); UNKNOWN when it cannot tell."""
    import submitit

    return submitit.SlurmJob(folder=folder, job_id=job_id).state


def squeue_state(job_id: str) -> str:
    """A job's state from the controller's queue (which a cluster without accounting still answers): UNKNOWN
    when it has left the queue, or squeue does not answer."""
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "UNKNOWN"
    states = out.stdout.split() if out.returncode == 0 else []
    return states[0] if states else "UNKNOWN"


def queued_job(run: Run) -> str | None:
    """The SLURM job the run was submitted to (or requeued in), if that job is still queued or running: sacct's
    state, else squeue's."""
    try:
        marker = json.loads((run.dir / SUBMITTED_NAME).read_text())
        state = job_state(marker["folder"], marker["job"])
        if state == "UNKNOWN":
            state = squeue_state(marker["job"])
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

    progress = Progress(runs, ledger, retry_failed, 1)
    books = Recorder(ledger, axis_values, progress)
    groups: dict[str, list[Run]] = {}
    for run in pending_runs(runs, ledger, retry_failed, books):
        job = queued_job(run)
        if job is not None:
            progress.skipped(run, f"queued as SLURM job {job}")
            continue
        groups.setdefault(json.dumps(parameters[run.base_cell], sort_keys=True), []).append(run)
    folder = out_dir / JOBS_DIR
    submitted = 0
    for key, group in groups.items():
        params = json.loads(key)
        requeues = params.pop("slurm_max_num_timeout", SLURM_MAX_REQUEUES)
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm", slurm_max_num_timeout=requeues)
        # in the repository root, where the job unpickles its command (`experiments.sweep.requeue.TaskCommand`)
        extra = {"chdir": str(ROOT)} | params.pop("slurm_additional_parameters", {})
        executor.update_parameters(**params, slurm_additional_parameters=extra)
        # the requeue waits for the warned task at most until 5 s before the limit
        wait_s = max(1, params.get("slurm_signal_delay_s", signal_delay_s(params["timeout_min"])) - 5)
        jobs = executor.map_array(task_function(wait_s), [run.to_json() for run in group])
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


class Slurm:
    """A scheduler places the runs: `--jobs` does not apply, and each process's threads are its task's CPUs."""

    name = "slurm"
    help = "a SLURM job array (submits and returns; run again to record)"
    on_this_machine = False
    waits = False

    def threads(self, spec: Spec, checked: dict[str, CheckedCell], threads: int | None, jobs: int) -> dict[str, int]:
        return {name: slurm_threads(spec.launcher, threads) for name in checked}

    def job_parameters(
        self, spec: Spec, checked: dict[str, CheckedCell], threads: dict[str, int], dry_run: bool
    ) -> dict[str, dict[str, Any]]:
        parameters = {}
        for name, c in checked.items():
            try:
                parameters[name] = slurm_parameters(spec.launcher, c.shape, threads[name], f"sweep-{spec.path.stem}")
            except SpecError as err:
                raise SpecError(f"cell {name!r}: {err}") from None
        return parameters

    def launch(self, launch: Launch) -> Launched:
        try:
            claimed, submitted = submit_slurm(
                launch.runs, launch.ledger, launch.axis_values, launch.parameters, launch.retry_failed, launch.out_dir
            )
        except RuntimeError as err:  # submitit: no `srun` here (not a SLURM machine), or sbatch refused
            raise SpecError(f"--launcher slurm: {err}") from None
        return Launched(claimed, submitted)
