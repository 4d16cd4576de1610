"""Processes per run and threads (`experiments.sweep.resources`), the `launcher:` block, and the SLURM
launcher up to `sbatch` (a fake `sbatch`/`srun` on PATH: no cluster is reachable here)."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from experiments.sweep import engine
from experiments.sweep.launchers import base as launcher_base
from experiments.sweep.launchers import jobs, local, slurm
from experiments.sweep.resources import RunShape, auto_jobs, count_devices, run_shape, threads_per_process
from experiments.sweep.runner import CLAIMED, Outcome, write_outcome
from experiments.sweep.runs import Run
from experiments.sweep.spec import SpecError, load_spec
from experiments.sweep.spec_blocks import LauncherOptions
from tools import sweep

DDP_CPU = {"trainer.accelerator": "cpu", "trainer.strategy": "ddp", "trainer.devices": 2}
MULTI_NODE_GPU = {"trainer.accelerator": "gpu", "trainer.strategy": "ddp", "trainer.devices": 4, "trainer.num_nodes": 2}
FAKE_SBATCH = """#!/bin/sh
# records the submission script, answers like sbatch
n=$(ls "$FAKE_SLURM_DIR" | wc -l)
cp "$1" "$FAKE_SLURM_DIR/submission$n.sh"
echo "Submitted batch job $((4242 + n))"
"""


@pytest.mark.parametrize(
    "cores, jobs, processes, threads", [(16, 2, 2, 4), (16, 1, 2, 8), (16, 4, 1, 4), (2, 1, 2, 1), (3, 2, 2, 1)]
)
def test_threads_per_process(cores, jobs, processes, threads):
    assert threads_per_process(cores, jobs, processes) == threads


@pytest.mark.parametrize(
    "cores, processes, runs, jobs",
    [(2, 1, 30, 2), (16, 2, 30, 8), (16, 1, 3, 3), (2, 2, 5, 1), (2, 4, 5, 1), (8, 1, 0, 1)],
)
def test_auto_jobs_fills_cores_with_single_thread_processes(cores, processes, runs, jobs):
    assert auto_jobs(cores, processes, runs) == jobs


def pretend_cores(monkeypatch, cores: int) -> None:
    """This machine has `cores` cores, for `--jobs auto` and for each launcher's share of them."""
    for module in (engine, launcher_base):
        monkeypatch.setattr(module, "available_cores", lambda: cores)


@pytest.mark.parametrize("cores, seeds, jobs, threads", [(4, [0, 1, 2], 3, 1), (4, [0], 1, 4), (2, [0, 1, 2], 2, 1)])
def test_jobs_auto_says_jobs_and_threads(tmp_path, tiny_spec, capsys, monkeypatch, cores, seeds, jobs, threads):
    pretend_cores(monkeypatch, cores)
    spec = tiny_spec(tmp_path / "spec.yaml", grid={"model.arch.pos_encoding": ["rope"]}, seeds=seeds)
    assert sweep.main([str(spec), "--out", str(tmp_path / "out"), "--dry-run", "--jobs", "auto"]) == 0
    out, err = capsys.readouterr()
    assert f"--jobs auto: {jobs} run(s) at a time × 1 process(es) × {threads} thread(s) on {cores} cores" in err
    lines = out.strip().splitlines()
    assert len(lines) == len(seeds) and all(f"OMP_NUM_THREADS={threads} " in line for line in lines)


def test_jobs_must_be_a_count_or_auto(tmp_path, tiny_spec, capsys):
    spec = tiny_spec(tmp_path / "spec.yaml", grid={"model.arch.pos_encoding": ["rope"]}, seeds=[0])
    for bad in ("0", "two"):
        with pytest.raises(SystemExit) as exit_info:
            sweep.main([str(spec), "--jobs", bad, "--dry-run"])
        assert exit_info.value.code == 2
        assert "or auto" in capsys.readouterr().err


def test_processes_per_run_from_trainer_settings():
    assert [count_devices(d) for d in (2, "2", [0, 1, 3], "0,1", "auto", -1, "-1")] == [2, 2, 3, 2, None, None, None]
    with pytest.raises(ValueError, match="devices"):
        count_devices(0)
    assert run_shape({"devices": "4", "num_nodes": 2, "accelerator": "gpu"}).processes() == 8
    assert run_shape({"devices": "auto", "accelerator": "cpu"}).processes() == 1  # Lightning: 1 CPU device
    assert run_shape({}) == RunShape(devices=None, nodes=1, accelerator="auto")


def test_jobs_count_runs_not_processes(tmp_path, tiny_spec, capsys, monkeypatch):
    """2 jobs of 2-process DDP runs on 8 cores: 2 threads per process; `--threads` still wins."""
    spec = tiny_spec(tmp_path / "spec.yaml", DDP_CPU, grid={"model.arch.pos_encoding": ["rope", "alibi"]})
    pretend_cores(monkeypatch, 8)
    assert sweep.main([str(spec), "--out", str(tmp_path / "out"), "--dry-run", "--jobs", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all("OMP_NUM_THREADS=2 " in line and "--trainer.devices=2" in line for line in lines)
    assert sweep.main([str(spec), "--out", str(tmp_path / "out"), "--dry-run", "--threads", "3"]) == 0
    assert all("OMP_NUM_THREADS=3 " in line for line in capsys.readouterr().out.splitlines())


def test_slurm_parameters_of_a_multi_node_ddp_run():
    launcher = LauncherOptions(partition="gpu", timeout_min=240, mem_gb=64, slurm_additional_parameters={"qos": "high"})
    shape = run_shape({"devices": 4, "num_nodes": 2, "accelerator": "gpu"})
    assert slurm.slurm_parameters(launcher, shape, threads=6, name="sweep-x") == {
        "name": "sweep-x",
        "nodes": 2,  # trainer.num_nodes
        "tasks_per_node": 4,  # one task (one DDP process) per device
        "gpus_per_node": 4,
        "cpus_per_task": 6,  # each task's threads
        "timeout_min": 240,
        "mem_gb": 64,
        "slurm_partition": "gpu",
        "slurm_additional_parameters": {"qos": "high"},
        "slurm_signal_delay_s": 90,  # the warning before the limit, to save and requeue (experiments.sweep.requeue)
        "slurm_max_num_timeout": slurm.SLURM_MAX_REQUEUES,
    }
    cpu = slurm.slurm_parameters(LauncherOptions(cpus_per_task=4), run_shape({"accelerator": "cpu"}), 4, "x")
    assert cpu["nodes"] == cpu["tasks_per_node"] == 1 and "gpus_per_node" not in cpu
    assert cpu["timeout_min"] == slurm.SLURM_TIMEOUT_MIN  # not submitit's 5 minutes
    with pytest.raises(SpecError, match="trainer.devices to a number"):
        slurm.slurm_parameters(LauncherOptions(), run_shape({"accelerator": "gpu"}), 1, "x")
    with pytest.raises(SpecError, match="launcher.tasks_per_node: 2, but the runs need 4"):
        slurm.slurm_parameters(LauncherOptions(tasks_per_node=2), shape, 1, "x")
    with pytest.raises(SpecError, match="no parameter.*'qos_level'"):
        slurm.slurm_parameters(LauncherOptions(slurm_other={"slurm_qos_level": "high"}), shape, 1, "x")


@pytest.mark.parametrize(
    "launcher, expected",
    [
        ({"partiton": "gpu"}, "unknown key 'partiton'"),
        ({"timeout_min": "4h"}, "launcher.timeout_min: needs int"),
        ({"cpus_per_task": 0}, "positive"),
        ({"slurm_setup": "module load cuda"}, "launcher.slurm_setup: needs list"),
    ],
)
def test_bad_launcher_block_is_a_spec_error(tmp_path, tiny_spec, launcher, expected):
    spec = tiny_spec(tmp_path / "spec.yaml", grid={"model.arch.norm": ["rmsnorm"]}, launcher=launcher)
    with pytest.raises(SpecError, match=expected):
        load_spec(spec)


def test_multi_node_runs_need_slurm(tmp_path, tiny_spec, capsys):
    spec = tiny_spec(tmp_path / "spec.yaml", MULTI_NODE_GPU, grid={"model.arch.norm": ["rmsnorm"]})
    assert sweep.main([str(spec), "--out", str(tmp_path / "out")]) == 2
    assert "use --launcher slurm" in capsys.readouterr().err and not (tmp_path / "out").exists()


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """`sbatch` that records each submission script and answers with a job id; `srun` (submitit looks for it)."""
    bin_dir, submitted = tmp_path / "bin", tmp_path / "submitted"
    bin_dir.mkdir()
    submitted.mkdir()
    (bin_dir / "sbatch").write_text(FAKE_SBATCH)
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_DIR", str(submitted))
    return submitted


def test_slurm_launcher_submits_a_job_array_and_keeps_the_books(tmp_path, tiny_spec, fake_slurm, capsys, monkeypatch):
    launcher = {"partition": "gpu", "timeout_min": 240, "cpus_per_task": 8, "slurm_additional_parameters": {"qos": "q"}}
    grid = {"model.arch.norm": ["rmsnorm", "layernorm"]}
    spec = tiny_spec(tmp_path / "spec.yaml", MULTI_NODE_GPU, grid=grid, launcher=launcher)
    out = tmp_path / "out"
    args = [str(spec), "--out", str(out), "--launcher", "slurm"]

    assert sweep.main([*args, "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert dry.count("# SLURM job of each run below") == 1 and '"nodes": 2' in dry and '"tasks_per_node": 4' in dry
    assert dry.count(" cli.py fit ") == 2 and not list(fake_slurm.iterdir())

    assert sweep.main(args) == 0
    printed = capsys.readouterr().out
    assert "submitted 2 run(s) as SLURM job 4242" in printed and "4242_0  norm=rmsnorm/seed0" in printed
    (script,) = fake_slurm.iterdir()
    sbatch = script.read_text()
    for option in (
        "--array=0-1%2",
        "--nodes=2",
        "--ntasks-per-node=4",
        "--gpus-per-node=4",
        "--cpus-per-task=8",
        "--partition=gpu",
        "--qos=q",
        "--time=240",
        f"--output={out / '_submitit'}/%A_%a_0_log.out",
        "--signal=USR2@90",
        f"--chdir={jobs.ROOT}",  # where the job unpickles its command
    ):
        assert f"#SBATCH {option}\n" in sbatch, option
    assert "srun --unbuffered" in sbatch and "-m submitit.core._submit" in sbatch  # one task per node-rank
    for cell, index in (("norm=rmsnorm", 0), ("norm=layernorm", 1)):
        marker = json.loads((out / cell / "seed0" / "submitted.json").read_text())
        assert marker["job"] == f"4242_{index}"
        assert (out / "_submitit" / f"4242_{index}_submitted.pkl").exists()
    submitted_run = pickle.loads((out / "_submitit" / "4242_0_submitted.pkl").read_bytes()).function
    assert submitted_run.command[1:] == jobs.TASK and submitted_run.cwd == str(jobs.ROOT)
    assert submitted_run.wait_s == 85 and callable(submitted_run.checkpoint)  # requeued at its time limit

    # again while the array waits in the queue: nothing is submitted twice
    monkeypatch.setattr(slurm, "job_state", lambda folder, job_id: "PENDING")
    assert sweep.main(args) == 0
    captured = capsys.readouterr()
    assert "queued as SLURM job 4242_0" in captured.err and "0 submitted now" in captured.out
    assert len(list(fake_slurm.iterdir())) == 1


class FakeJob:
    """A finished submitit job: its output, or the error it raised (which carries the task's stderr)."""

    def __init__(self, output: str = "", error: str | None = None):
        self.output, self.error = output, error

    def exception(self):
        return RuntimeError(self.error) if self.error is not None else None

    def result(self):
        return self.output


def test_local_job_outcomes(tmp_path):
    run = Run("cell", 0, tmp_path / "cell" / "seed0", (), 1)
    claimed = '{"run": "cell/seed0", "status": "claimed", "note": "claimed by h:1, running since t"}'
    expected = Outcome(CLAIMED, "claimed by h:1, running since t")
    assert local.local_outcome(run, FakeJob(f"log line\n{claimed}\n")) == expected
    interrupted = '{"run": "cell/seed0", "status": "interrupted", "note": "resumed next time"}'
    assert local.local_outcome(run, FakeJob(error=f"Traceback ...\n{interrupted}")) is None  # stays unrecorded
    assert local.local_outcome(run, FakeJob(error="Traceback ...\nOSError: disk full")) == Outcome(
        "failed", "OSError: disk full"
    )
    run.dir.mkdir(parents=True)
    write_outcome(run, Outcome("failed", "ValueError: bad"))  # what the task leaves: read before the verdict
    assert local.local_outcome(run, FakeJob(claimed)) == Outcome("failed", "ValueError: bad")
