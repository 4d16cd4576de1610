"""A `horizons:` sweep end to end: the tiny GPT, two cells at 16 and 64 steps (stable runs to step 48, branches from
steps 12 and 48). Two sweeps at once on one folder train each run once; a sweep killed with SIGKILL in the stable
phase, then again in a branch, resumes each from its own checkpoint to the same ledger; a stable run that fails
blocks its branches, which are recorded, not retried (with `--retry-failed`, the stable run is)."""

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

from contract.run_record import read_run_record
from experiments.sweep import run_sweep
from tests.conftest import BASE, FIXED
from tools import sweep

ROOT = Path(__file__).resolve().parents[3]
SETTINGS = {k: v for k, v in FIXED.items() if k != "trainer.max_steps"} | {
    "model.optim.schedule": "wsd",
    "model.optim.warmup_steps": 2,
    "model.optim.decay_fraction": 0.25,
}
KEPT = ("status", "phase", "horizon", "parent", "steps", "diverged_at_step", "error")
METRICS = ("val/loss", "val/loss@16", "val/loss@32", "val/ppl", "train/loss")


def write_spec(path: Path, **entries) -> Path:
    spec = {"base": BASE, "fixed": SETTINGS, "grid": {"model.arch.pos_encoding": ["learned", "rope"]},
            "seeds": [0], "checkpoint_every": 2, "horizons": [16, 64]} | entries  # fmt: skip
    path.write_text(yaml.safe_dump({k: v for k, v in spec.items() if v is not None}, sort_keys=False))
    return path


def command(spec: Path, out: Path) -> list[str]:
    return [sys.executable, "cli.py", "sweep", str(spec), "--out", str(out), "--threads", "1"]


def read_rows(out: Path) -> dict[tuple[str, str], dict[str, str]]:
    with (out / "results.csv").open(newline="") as f:
        return {(r["cell"], r["seed"]): r for r in csv.DictReader(f)}


def kill_when(sweep_process: subprocess.Popen, out: Path, pattern: str) -> Path:
    """SIGKILLs the sweep and its run once a checkpoint matching `pattern` exists; returns that run's folder."""
    deadline = time.monotonic() + 600
    while not (found := list(out.glob(pattern))):
        assert sweep_process.poll() is None, f"the sweep ended before {pattern} was written"
        assert time.monotonic() < deadline, f"no {pattern} after 600 s"
        time.sleep(0.02)
    os.killpg(sweep_process.pid, signal.SIGKILL)
    sweep_process.wait()
    run_dir = found[0].parents[1]
    assert read_run_record(run_dir).status == "running", "the run ended before the kill: the test would prove nothing"
    return run_dir


@pytest.fixture(scope="module")
def shared_folder(tmp_path_factory):
    """Two sweeps started at once on one folder, then a third call that records what either left to the other."""
    tmp = tmp_path_factory.mktemp("horizons")
    spec, out = write_spec(tmp / "spec.yaml"), tmp / "out"
    logs = [tmp / f"sweep{i}.log" for i in range(2)]
    sweeps = [subprocess.Popen(command(spec, out), cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT)
              for log in logs]  # fmt: skip
    assert [s.wait(timeout=900) for s in sweeps] == [0, 0], [log.read_text() for log in logs]
    assert sweep.main(command(spec, out)[3:]) == 0
    return out


def test_two_sweeps_share_the_folder_and_train_each_run_once(shared_folder):
    rows = read_rows(shared_folder)
    assert sorted((cell, row["phase"]) for (cell, _), row in rows.items()) == sorted(
        [(f"pos_encoding={p},horizon=64~stable", "stable") for p in ("learned", "rope")]
        + [(f"pos_encoding={p},horizon={h}", "branch") for p in ("learned", "rope") for h in (16, 64)]
    )
    assert all(row["status"] == "done" for row in rows.values())
    assert rows[("pos_encoding=rope,horizon=64~stable", "0")]["steps"] == "48"
    for cell, seed in rows:
        log = (shared_folder / cell / f"seed{seed}" / "run.log").read_text()
        assert log.count(" start: ") == 1 and " resume: " not in log, (cell, seed)  # trained once, by one sweep
    report = (shared_folder / "report.md").read_text()  # the budget axis: 48 + 4 + 16 run-steps for 16 + 64
    assert "## Horizons" in report and ("The sweep's 2 cell(s) × 1 seed(s): 136 run-steps instead of 160, 15% saved "
                                        "(separate runs would train 1.18× as many). Its finished runs have trained 136 "
                                        "run-steps.") in report  # fmt: skip


def test_killed_in_the_stable_phase_and_in_a_branch_resumes_to_the_same_ledger(shared_folder, tmp_path):
    spec, out = write_spec(tmp_path / "spec.yaml"), tmp_path / "out"
    launch = lambda: subprocess.Popen(command(spec, out), cwd=ROOT, start_new_session=True,  # noqa: E731
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)  # fmt: skip
    stable = kill_when(launch(), out, "*~stable/seed0/checkpoints/last.ckpt")
    branch = kill_when(launch(), out, "*,horizon=64/seed0/checkpoints/last.ckpt")
    rows = read_rows(out)
    assert (stable.parent.name, "0") in rows and (branch.parent.name, "0") not in rows  # resumed, then cut again
    assert sweep.main(command(spec, out)[3:]) == 0
    for run_dir in (stable, branch):  # each from its own checkpoint, not from scratch
        assert " resume: " in (run_dir / "run.log").read_text(), run_dir
    rows, expected = read_rows(out), read_rows(shared_folder)
    assert rows.keys() == expected.keys()
    for key, row in rows.items():
        assert {k: row[k] for k in KEPT} == {k: expected[key][k] for k in KEPT}, key
        assert {m: row[m] for m in METRICS} == {m: expected[key][m] for m in METRICS}, key  # exactly


def test_a_failed_stable_run_blocks_its_branches_without_retrying(tmp_path):
    bad_bpe = {"name": "bad_bpe", "data.tokenizer": "bpe", "data.bpe_vocab_size": 10}  # fails as the data is built
    spec, out = write_spec(tmp_path / "spec.yaml", grid=None, cells=[bad_bpe]), tmp_path / "out"
    first = run_sweep(spec, out, threads=1)
    stable, branches = "bad_bpe,horizon=64~stable/seed0", ["bad_bpe,horizon=16/seed0", "bad_bpe,horizon=64/seed0"]
    assert sorted(first.runs["failed"]) == sorted([stable, *branches]) and first.phases["branch"] == tuple(branches)
    rows = read_rows(out)
    error = rows[("bad_bpe,horizon=16", "0")]["error"]
    assert error.startswith(f"parent {stable} failed: ") and "vocab" in error.lower()
    again = run_sweep(spec, out, threads=1)  # recorded: nothing runs again
    assert sorted(again.runs["failed"]) == sorted(first.runs["failed"]) and read_rows(out) == rows
    assert (out / "bad_bpe,horizon=64~stable" / "seed0" / "run.log").read_text().count(" start: ") == 1
    assert not (out / "bad_bpe,horizon=16").exists()  # a blocked branch never started
    run_sweep(spec, out, threads=1, retry_failed=True)  # the stable run again (it fails again); the branches wait
    assert (out / "bad_bpe,horizon=64~stable" / "seed0" / "run.log").read_text().count(" start: ") == 2
    assert read_rows(out)[("bad_bpe,horizon=16", "0")]["error"].startswith(f"parent {stable} failed: ")
    assert not (out / "bad_bpe,horizon=16").exists()


def test_tuned_at_each_horizon_the_final_branch_is_the_search_branch_of_the_chosen_point(tmp_path):
    """`tune:` with `horizons:` (two rates, no extension; the final seed is the tune seed): a final branch starts from
    the search's own stable run at its horizon's chosen rate, so it trains what that point's search branch did."""
    tune = {"grid": {"model.optim.lr": [0.003, 0.03]}, "extend": 0}
    fixed = SETTINGS | {"data.test_split": "held_out"}
    spec = write_spec(tmp_path / "spec.yaml", grid={"model.arch.pos_encoding": ["rope"]}, fixed=fixed, tune=tune)
    assert sweep.main(command(spec, tmp_path / "out")[3:]) == 0
    rows = read_rows(tmp_path / "out")
    assert all(row["status"] == "done" for row in rows.values())
    phases = sorted(row["phase"] for row in rows.values())
    assert phases == ["final"] * 2 + ["search"] * 4 + ["stable"] * 2  # the final runs' stable runs: the search's
    for horizon in (16, 64):
        final = rows[(f"pos_encoding=rope,horizon={horizon}", "0")]
        lr = final["model.optim.lr"]
        searched = rows[(f"pos_encoding=rope,horizon={horizon}~lr={lr}", "0")]
        assert final["parent"] == searched["parent"] == f"pos_encoding=rope,horizon=64~lr={lr}~stable/seed0"
        assert {m: final[m] for m in METRICS} == {m: searched[m] for m in METRICS}  # the same run, value for value
        assert final["test/loss"] and not searched.get("test/loss")  # only the final runs meet the test split
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Horizons" in report and "## Tuning" in report
