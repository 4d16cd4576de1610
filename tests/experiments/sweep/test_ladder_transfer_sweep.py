"""A ladder tuned once, end to end (`tune.transfer`): the tiny GPT at widths 16 and 32, the lr searched at 16 only,
transferred to 32 by the SP rule (× 16/32) and verified there at ×½ and ×2 (×1: the final run). Two sweeps at once
on one folder train each run once; a sweep killed with SIGKILL mid-verify resumes to the same ledger."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from experiments.analysis.sweep_report import build_report
from tests.conftest import BASE, FIXED
from tools import sweep

ROOT = Path(__file__).resolve().parents[3]
LR = "model.optim.lr"
TOP = "pos_encoding=rope,size=d32"  # the largest size's cell, where the transfer is verified
METRICS = ("val/loss", "test/loss", "train/loss")


def write_spec(path: Path) -> Path:
    fixed = {k: v for k, v in FIXED.items() if k != "model.arch.d_model"} | {"data.test_split": "held_out"}
    tune = {"grid": {LR: [0.003, 0.01]}, "extend": 0,
            "transfer": {"rule": {LR: {"with": "model.arch.d_model", "power": -1}}}}  # fmt: skip
    ladder = [{"name": "d16", "model.arch.d_model": 16}, {"name": "d32", "model.arch.d_model": 32}]
    spec = {"base": BASE, "fixed": fixed, "grid": {"model.arch.pos_encoding": ["rope"]}, "seeds": [0],
            "checkpoint_every": 2, "tune": tune, "ladder": ladder}  # fmt: skip
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def command(spec: Path, out: Path) -> list[str]:
    return [sys.executable, "cli.py", "sweep", str(spec), "--out", str(out), "--threads", "1"]


def read_rows(out: Path) -> dict[tuple[str, str], dict[str, str]]:
    with (out / "results.csv").open(newline="") as f:
        return {(r["cell"], r["seed"]): r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def shared_folder(tmp_path_factory):
    """Two sweeps started at once on one folder, then a third call that records what either left to the other."""
    tmp = tmp_path_factory.mktemp("transfer")
    spec, out = write_spec(tmp / "spec.yaml"), tmp / "out"
    logs = [tmp / f"sweep{i}.log" for i in range(2)]
    sweeps = [subprocess.Popen(command(spec, out), cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT)
              for log in logs]  # fmt: skip
    assert [s.wait(timeout=900) for s in sweeps] == [0, 0], [log.read_text() for log in logs]
    assert sweep.main(command(spec, out)[3:]) == 0
    return out


def test_two_sweeps_share_the_folder_and_train_each_run_once(shared_folder):
    rows = read_rows(shared_folder)
    phases = {key: row["phase"] for key, row in rows.items()}
    search = {cell for (cell, _), phase in phases.items() if phase == "search"}
    assert search == {"pos_encoding=rope,size=d16~lr=0.003", "pos_encoding=rope,size=d16~lr=0.01"}  # d16 only
    assert {cell for (cell, _), p in phases.items() if p == "final"} == {"pos_encoding=rope,size=d16", TOP}
    chosen = float(rows[("pos_encoding=rope,size=d16", "0")][LR])
    transferred = float(rows[(TOP, "0")][LR])
    assert transferred == pytest.approx(chosen / 2)  # SP: × (32 / 16)^-1
    verify = sorted(float(row[LR]) for row in rows.values() if row["phase"] == "verify")
    assert verify == pytest.approx([transferred / 2, transferred * 2]) and len(rows) == 6
    assert all(row["status"] in ("done", "diverged") for row in rows.values())
    for cell, seed in rows:
        log = (shared_folder / cell / f"seed{seed}" / "run.log").read_text()
        assert log.count(" start: ") == 1 and " resume: " not in log, (cell, seed)  # trained once, by one sweep
    build_report(shared_folder)
    report = (shared_folder / "report.md").read_text()
    assert "### Transfer" in report and ("| transfer verified |" in report or "**transfer failed**" in report)


def test_killed_mid_verify_and_resumed_ends_with_the_same_ledger(shared_folder, tmp_path):
    spec, out = write_spec(tmp_path / "spec.yaml"), tmp_path / "out"
    killed = subprocess.Popen(command(spec, out), cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT)  # fmt: skip
    deadline = time.monotonic() + 600
    while not (checkpoints := list(out.glob(f"{TOP}~*/seed0/checkpoints/last.ckpt"))):
        assert killed.poll() is None, "the sweep ended before a verify run wrote a checkpoint"
        assert time.monotonic() < deadline, "no verify checkpoint after 600 s"
        time.sleep(0.02)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    cut = checkpoints[0].parents[2].name  # the verify run the kill cut short
    assert (cut, "0") not in read_rows(out)
    assert sweep.main(command(spec, out)[3:]) == 0
    assert " resume: " in (out / cut / "seed0" / "run.log").read_text()  # from its checkpoint, not from scratch
    rows, expected = read_rows(out), read_rows(shared_folder)
    assert rows.keys() == expected.keys()
    for key, row in rows.items():
        assert (row["status"], row["phase"], row[LR]) == (expected[key]["status"], expected[key]["phase"],
                                                          expected[key][LR])  # fmt: skip
        for metric in METRICS:
            if expected[key].get(metric):
                assert float(row[metric]) == pytest.approx(float(expected[key][metric]), rel=1e-5), (key, metric)
