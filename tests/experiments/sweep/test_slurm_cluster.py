"""`--launcher slurm` against a real scheduler: the one-node SLURM of `scripts/local_slurm.sh` (CI's `.ci/run`
starts it). Skipped, with the reason, where no controller answers. The fake-`sbatch` tests
(`test_launchers.py`) keep the parameter mapping that one machine cannot run (2 nodes × 4 GPUs)."""

from __future__ import annotations

import re
import shutil
import subprocess
import time

import pytest

from contract.run_record import read_run_record
from experiments.records.ledger import Ledger
from tools import sweep


def _controller_answers() -> bool:
    if shutil.which("sinfo") is None:
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = pytest.mark.skipif(
    not _controller_answers(), reason="no SLURM controller answers here (start one: scripts/local_slurm.sh start)"
)

TWO_CELLS = {"model.arch.norm": ["rmsnorm", "layernorm"]}
CPU = {"trainer.accelerator": "cpu"}  # with devices 'auto': one task per run


def _queued(job: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True, timeout=10)
    return bool(out.stdout.strip())


def _wait(job: str, timeout_s: float = 600) -> None:
    end = time.monotonic() + timeout_s
    while _queued(job):
        assert time.monotonic() < end, f"SLURM job {job} still queued after {timeout_s:.0f} s"
        time.sleep(2)


def _job_of(printed: str) -> str:
    return printed.split("as SLURM job ")[1].split()[0].rstrip(":,.")


def test_dry_run_prints_the_jobs_and_submits_nothing(tmp_path, tiny_spec, capsys):
    spec = tiny_spec(tmp_path / "spec.yaml", CPU, grid=TWO_CELLS)
    before = subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout
    assert sweep.main([str(spec), "--out", str(tmp_path / "out"), "--launcher", "slurm", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "# SLURM job of each run below" in printed and '"tasks_per_node": 1' in printed  # devices auto, CPU: 1
    assert subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout == before


def test_a_sweep_submitted_runs_to_the_end_and_the_second_command_records_it(tmp_path, tiny_spec, capsys):
    spec = tiny_spec(tmp_path / "spec.yaml", CPU, grid=TWO_CELLS, launcher={"timeout_min": 15})
    out = tmp_path / "out"
    args = [str(spec), "--out", str(out), "--launcher", "slurm"]
    assert sweep.main(args) == 0
    printed = capsys.readouterr().out
    assert "submitted 2 run(s) as SLURM job" in printed
    _wait(_job_of(printed))
    assert sweep.main(args) == 0
    rows = Ledger(out / "results.csv").rows
    assert {(cell, row["status"]) for (cell, _), row in rows.items()} == {
        ("norm=rmsnorm", "done"),
        ("norm=layernorm", "done"),
    }
    assert all(row["steps"] == "12" for row in rows.values())


def _submit_and_finish(args: list[str], capsys) -> None:
    """Submits the sweep's runs, waits for the job to leave the queue, records them with the second command."""
    assert sweep.main(args) == 0
    _wait(_job_of(capsys.readouterr().out))
    assert sweep.main(args) == 0
    capsys.readouterr()


def _only_row(out) -> dict:
    (row,) = Ledger(out / "results.csv").rows.values()
    assert row["status"] == "done", row
    return row


def _reference(tmp_path, tiny_spec, fixed, cell, capsys) -> dict:
    """The same cell trained uninterrupted, in one process, by the pool launcher."""
    spec = tiny_spec(tmp_path / "reference.yaml", fixed, cells=[cell])
    assert sweep.main([str(spec), "--out", str(tmp_path / "reference"), "--jobs", "1"]) == 0
    capsys.readouterr()
    return _only_row(tmp_path / "reference")


def test_a_job_cancelled_mid_run_is_resubmitted_and_resumes_to_the_same_end(tmp_path, tiny_spec, capsys):
    longer = CPU | {"trainer.max_steps": 120}
    cell = {"model.arch.norm": "rmsnorm"}
    spec = tiny_spec(tmp_path / "spec.yaml", longer, cells=[cell], launcher={"timeout_min": 15})
    out = tmp_path / "out"
    args = [str(spec), "--out", str(out), "--launcher", "slurm"]
    assert sweep.main(args) == 0
    job = _job_of(capsys.readouterr().out)
    run_dir = out / "norm=rmsnorm" / "seed0"
    end = time.monotonic() + 300
    while not (run_dir / "checkpoints" / "last.ckpt").exists():
        assert time.monotonic() < end and _queued(job), "the job ended before its first checkpoint"
        time.sleep(0.5)
    subprocess.run(["scancel", job], check=True)
    _wait(job)
    assert read_run_record(run_dir).status == "running", "finished before scancel"
    _submit_and_finish(args, capsys)  # the run is not done: submitted again, resumed from its checkpoint
    resumed = _only_row(out)
    assert resumed["steps"] == "120"
    assert "resum" in (run_dir / "run.log").read_text().lower()
    reference = _reference(tmp_path, tiny_spec, longer, cell, capsys)
    assert float(resumed["val/loss"]) == pytest.approx(float(reference["val/loss"]), rel=1e-5)


def test_a_two_task_ddp_run_under_sbatch_equals_one_process(tmp_path, tiny_spec, capsys):
    """One job of 2 tasks (Lightning's SLURM environment, gloo), half the batch each: one process's numbers."""
    ddp = CPU | {"trainer.strategy": "ddp", "trainer.devices": 2, "data.batch_size": 4}
    cell = {"model.arch.pos_encoding": "alibi"}
    spec = tiny_spec(tmp_path / "spec.yaml", ddp, cells=[cell], launcher={"timeout_min": 15})
    out = tmp_path / "out"
    _submit_and_finish([str(spec), "--out", str(out), "--launcher", "slurm"], capsys)
    row = _only_row(out)
    assert read_run_record(out / "pos_encoding=alibi" / "seed0").processes == 2
    reference = _reference(tmp_path, tiny_spec, CPU, cell, capsys)
    for metric in ("val/loss", "val/loss@16", "val/loss@32", "train/loss"):
        assert float(row[metric]) == pytest.approx(float(reference[metric]), rel=1e-4), metric


ONE_THREAD = ["--jobs", "1", "--threads", "1"]  # as each job's run (cpus_per_task 1): the same speed and numbers


def _steps_per_second(tmp_path, tiny_spec, fixed, cell, capsys, steps: int = 1000) -> float:
    """This machine's training speed now (it varies tenfold with the load), from a short run's own clock."""
    more = fixed | {"trainer.max_steps": steps, "trainer.val_check_interval": steps}
    spec = tiny_spec(tmp_path / "calibrate.yaml", more, cells=[cell], checkpoint_every=steps)
    assert sweep.main([str(spec), "--out", str(tmp_path / "calibrate"), *ONE_THREAD]) == 0
    capsys.readouterr()
    log = next((tmp_path / "calibrate").glob("*/seed0/run.log")).read_text()
    minutes, seconds = re.findall(r"done: step \d+/\d+\s+elapsed (\d+)m(\d+)s", log)[-1]
    return steps / max(1, 60 * int(minutes) + int(seconds))


def test_a_run_longer_than_its_time_limit_is_requeued_until_it_ends_as_uninterrupted(tmp_path, tiny_spec, capsys):
    """Jobs of 1 minute, warned 15 s before the limit by default (this SLURM sends it up to ~30 s earlier still: each
    job trains ~5-35 s); a requeued job waits `cred_expire` (10 s in scripts/local_slurm.sh) before it starts again.
    The run is ~90 s of training at this speed (a job trains 45 s at most): it needs several jobs however fast."""
    cell = {"model.arch.norm": "rmsnorm"}
    steps = max(600, round(90 * _steps_per_second(tmp_path, tiny_spec, CPU, cell, capsys)))
    longer = CPU | {"trainer.max_steps": steps, "trainer.val_check_interval": steps // 3}
    launcher = {"timeout_min": 1, "slurm_max_num_timeout": 20}  # room for a slow machine's many short jobs
    spec = tiny_spec(tmp_path / "spec.yaml", longer, cells=[cell], launcher=launcher, checkpoint_every=steps // 10)
    out = tmp_path / "out"
    args = [str(spec), "--out", str(out), "--launcher", "slurm"]
    assert sweep.main(args) == 0
    job = _job_of(capsys.readouterr().out)
    run_dir = out / "norm=rmsnorm" / "seed0"
    end = time.monotonic() + 300
    while "time limit" not in ((run_dir / "run.log").read_text() if (run_dir / "run.log").exists() else ""):
        assert time.monotonic() < end and _queued(job), "the job ended without a warning"
        time.sleep(1)
    # meanwhile a sweep sees the run queued in its requeued job: it neither records nor submits it again
    assert sweep.main(args) == 0
    captured = capsys.readouterr()
    assert f"queued as SLURM job {job}" in captured.err and "0 submitted now" in captured.out, captured
    _wait(job, timeout_s=1200)
    assert sweep.main(args) == 0
    capsys.readouterr()
    row = _only_row(out)  # one row: the run, recorded once
    assert row["steps"] == str(steps)
    log = (run_dir / "run.log").read_text()
    with capsys.disabled():  # (pytest -s shows it)
        print(f"\n{steps} steps, requeued {log.count('time limit: SLURM job')} time(s)")
    assert log.count("time limit: SLURM job") >= 1 and log.count("resume:") >= 1
    reference = tiny_spec(tmp_path / "reference.yaml", longer, cells=[cell], checkpoint_every=steps // 10)
    assert sweep.main([str(reference), "--out", str(tmp_path / "reference"), *ONE_THREAD]) == 0
    capsys.readouterr()
    uninterrupted = _only_row(tmp_path / "reference")
    for metric in ("val/loss", "val/loss@16", "train/loss"):
        assert row[metric] == uninterrupted[metric], metric  # the same numbers: resumed where it stopped
