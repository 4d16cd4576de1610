"""Requeue at the time limit without a scheduler: the command submitit checkpoints (`experiments.sweep.requeue`),
the job parameters that set the warning, and a task warned by SIGUSR2 (as SLURM signals every process of a job)
that saves its run where it stands and resumes it to the uninterrupted run's weights. The real requeue, under
SLURM, is `test_slurm_cluster.py`'s."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time

import pytest
import torch
from submitit.core.utils import FailedJobError

from contract.run_record import read_run_record
from experiments.sweep import plan_sweep
from experiments.sweep.claims import CLAIM_NAME
from experiments.sweep.launchers import slurm
from experiments.sweep.requeue import TaskCommand
from experiments.sweep.resources import run_shape
from experiments.sweep.runner import SUBMITTED_NAME, checkpoint_ok
from experiments.sweep.spec import ROOT
from experiments.sweep.spec_blocks import LauncherOptions
from experiments.sweep.task import INTERRUPTED

EXIT_WITH = [sys.executable, "-c", "import sys; print('task output'); sys.exit(int(sys.argv[1]))"]


def test_the_command_runs_the_task_and_returns_its_output(tmp_path):
    command = TaskCommand(EXIT_WITH, cwd=str(tmp_path), wait_s=5)
    assert command("0") == "task output"
    with pytest.raises(FailedJobError):
        command("1")
    assert pickle.loads(pickle.dumps(command))._process is None  # its process stays behind


@pytest.mark.parametrize("status, requeued", [(INTERRUPTED, True), (-signal.SIGUSR2, True), (0, False), (1, False)])
def test_checkpoint_requeues_the_same_command_unless_the_run_ended(tmp_path, status, requeued):
    command = TaskCommand(EXIT_WITH, cwd=str(tmp_path), wait_s=5)
    command._process = subprocess.Popen([*EXIT_WITH, "0"] if status < 0 else [*EXIT_WITH, str(status)])
    if status < 0:
        command._process.wait()
        command._process.returncode = status  # killed by the warning before its handler was set
    delayed = command.checkpoint('{"run": "json"}')
    if not requeued:
        assert delayed is None
        return
    again = pickle.loads(pickle.dumps(delayed))  # what submitit dumps for the requeued job
    assert again.function.command == EXIT_WITH and again.function.cwd == str(tmp_path)
    assert again.function.wait_s == 5 and again.args == ('{"run": "json"}',)


def test_a_task_still_stopping_is_requeued_after_the_wait(tmp_path):
    command = TaskCommand(EXIT_WITH, cwd=str(tmp_path), wait_s=0.2)
    command._process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert command.checkpoint("x") is not None  # SLURM ends it; the requeued job resumes from its checkpoint
    finally:
        command._process.kill()
        command._process.wait()


def test_the_warning_and_the_requeues_in_the_job_parameters():
    cpu = run_shape({"accelerator": "cpu"})
    short = slurm.slurm_parameters(LauncherOptions(timeout_min=1), cpu, 1, "x")
    assert short["slurm_signal_delay_s"] == 15 and short["slurm_max_num_timeout"] == slurm.SLURM_MAX_REQUEUES
    assert slurm.slurm_parameters(LauncherOptions(), cpu, 1, "x")["slurm_signal_delay_s"] == 90
    given = LauncherOptions(timeout_min=1, slurm_other={"slurm_signal_delay_s": 40, "slurm_max_num_timeout": 3})
    chosen = slurm.slurm_parameters(given, cpu, 1, "x")
    assert chosen["slurm_signal_delay_s"] == 40 and chosen["slurm_max_num_timeout"] == 3


STEPS = 2000  # ~15 s on one thread: the warning comes while it trains
LONG = {"trainer.accelerator": "cpu", "trainer.max_steps": STEPS, "trainer.val_check_interval": STEPS // 4}


def _task(run_json: str, env: dict[str, str]) -> subprocess.Popen:
    """The job's task, in its own process group (SLURM signals every process of a job)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SUBMITIT_"))} | env
    return subprocess.Popen(
        [sys.executable, "-m", "experiments.sweep.task", run_json],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _weights(run_dir) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]


def test_a_warned_task_saves_its_run_leaves_it_queued_and_the_requeued_job_ends_it_as_uninterrupted(
    tmp_path, tiny_spec
):
    # checkpoint_every = the steps: the only checkpoint before the end is the one the warning saves
    spec = tiny_spec(tmp_path / "spec.yaml", LONG, cells=[{"model.arch.norm": "rmsnorm"}], checkpoint_every=STEPS)
    (run,) = plan_sweep(spec, tmp_path / "out", launcher="slurm", threads=1).runs()
    job = {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "77", "SUBMITIT_FOLDER": str(tmp_path / "_submitit")}
    task = _task(run.to_json(), job)
    end = time.monotonic() + 120
    while read_run_record(run.dir) is None:  # written at fit start, once Lightning's handlers are set
        assert task.poll() is None and time.monotonic() < end, "the run did not start"
        time.sleep(0.2)
    time.sleep(1)
    os.killpg(task.pid, signal.SIGUSR2)
    out, _ = task.communicate(timeout=120)
    assert task.returncode == INTERRUPTED, out  # (0: the run ended before the warning)
    assert json.loads(out.splitlines()[-1])["status"] == "interrupted"
    assert checkpoint_ok(run), "no checkpoint saved on the warning"
    saved = torch.load(run.checkpoint, map_location="cpu", weights_only=False)["global_step"]
    assert 0 < saved < STEPS
    marker = json.loads((run.dir / SUBMITTED_NAME).read_text())  # a sweep now sees the run queued in job 77
    assert marker["job"] == "77" and marker["requeued"] and not (run.dir / CLAIM_NAME).exists()
    assert "time limit: SLURM job 77 warned" in (run.dir / "run.log").read_text()

    # the requeued job (the same id) takes over a claim its earlier run left (from another host, say)
    (run.dir / CLAIM_NAME).write_text(json.dumps({"host": "elsewhere", "pid": 1, "job": "77", "token": "old"}))
    resumed = _task(run.to_json(), job | {"SLURM_RESTART_COUNT": "1"})
    assert resumed.wait(timeout=300) == 0, resumed.stdout.read()
    assert read_run_record(run.dir).status == "done" and read_run_record(run.dir).steps == STEPS
    assert not (run.dir / SUBMITTED_NAME).exists()

    reference_spec = tiny_spec(tmp_path / "reference.yaml", LONG, cells=[{"model.arch.norm": "rmsnorm"}],
                               checkpoint_every=STEPS)  # fmt: skip
    (reference,) = plan_sweep(reference_spec, tmp_path / "reference", launcher="slurm", threads=1).runs()
    assert _task(reference.to_json(), {}).wait(timeout=300) == 0
    ours, theirs = _weights(run.dir), _weights(reference.dir)
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
