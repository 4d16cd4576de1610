"""`--launcher slurm` against a real scheduler: the one-node SLURM of `scripts/local_slurm.sh` (CI's `.ci/run`
starts it). Skipped, with the reason, where no controller answers. The fake-`sbatch` tests
(`test_launchers.py`) keep the parameter mapping that one machine cannot run (2 nodes × 4 GPUs)."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

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
        ("norm=rmsnorm", "done"), ("norm=layernorm", "done")
    }
    assert all(row["steps"] == "12" for row in rows.values())
