"""A decay branch equals the same run trained from scratch (issue 51): a `horizons:` sweep of the tiny GPT at 16 and
40 steps (WSD, a quarter decaying: branch points 12, a validation step, and 30, the stable run's last step), with
dropout (the generators travel in the checkpoints) and a uniform weight average over each run's last quarter
(averaging without a cooldown's window), and a plain sweep of the same cell at 16 and 40 steps. On CPU
with one seed, every value each branch logged, and the stable run's before the branch point, equals the scratch
run's at the same step and tag, bit for bit, and so do their ledger rows."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import yaml

from experiments.records.events import read_scalars
from experiments.records.ledger import TIMINGS
from tests.conftest import BASE, FIXED
from tools import sweep

HORIZONS = (16, 40)
STARTS = {16: 12, 40: 30}  # 16 - round(0.25 · 16), 40 - round(0.25 · 40)
SETTINGS = {k: v for k, v in FIXED.items() if k != "trainer.max_steps"} | {
    "model.optim.schedule": "wsd",
    "model.optim.warmup_steps": 2,
    "model.optim.decay_fraction": 0.25,
    "model.arch.dropout": 0.1,
    "trainer.log_every_n_steps": 1,
    "diagnostics.every_n_steps": 4,
    # a uniform average over each run's last quarter: from its branch point (the run's own length sets the window;
    # horizons: refuses a longer one, which would open in the stable run)
    "averaging.kind": "uniform",
    "averaging.last_fraction": 0.25,
}
GRID = {"model.arch.pos_encoding": ["rope"]}
# a row's columns that depend on when and where it ran, or on the sweep it belongs to
NOT_COMPARED = {"cell", *TIMINGS, "git_commit", "trainer.max_steps", "phase", "horizon", "parent"}


def write(path: Path, **entries) -> Path:
    path.write_text(yaml.safe_dump({"base": BASE, "seeds": [0], "checkpoint_every": 2} | entries, sort_keys=False))
    return path


def rows(out: Path) -> dict[str, dict[str, str]]:
    with (out / "results.csv").open(newline="") as f:
        return {r["cell"]: r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("branch")
    branched = write(tmp / "branched.yaml", fixed=SETTINGS, grid=GRID, horizons=list(HORIZONS))
    scratch = write(tmp / "scratch.yaml", fixed=SETTINGS, grid=GRID | {"trainer.max_steps": list(HORIZONS)})
    for spec, out in ((branched, tmp / "branched"), (scratch, tmp / "scratch")):
        assert sweep.main([str(spec), "--out", str(out), "--threads", "1"]) == 0
    return tmp / "branched", tmp / "scratch"


def same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("horizon", HORIZONS)
def test_a_branch_logs_every_value_the_run_from_scratch_logs(sweeps, horizon):
    branched, scratch = sweeps
    start = STARTS[horizon]
    stable = read_scalars(branched / "pos_encoding=rope,horizon=40~stable" / "seed0").curves
    branch = read_scalars(branched / f"pos_encoding=rope,horizon={horizon}" / "seed0").curves
    reference = read_scalars(scratch / f"pos_encoding=rope,max_steps={horizon}" / "seed0").curves
    assert min(min(points) for tag, points in branch.items() if tag.startswith("train/")) == start  # it resumed
    assert any(start <= step for step in reference["val/loss"]) and reference["diagnostics/grad_norm/block0"]
    for tag, points in reference.items():
        joined = {step: v for step, v in stable.get(tag, {}).items() if step < start} | branch.get(tag, {})
        assert joined.keys() == points.keys(), tag
        unequal = {step: (joined[step], v) for step, v in points.items() if not same(joined[step], v)}
        assert not unequal, (tag, unequal)
    assert set(branch) <= set(reference)


@pytest.mark.parametrize("horizon", HORIZONS)
def test_a_branch_records_the_row_of_the_run_from_scratch(sweeps, horizon):
    branched, scratch = sweeps
    row = rows(branched)[f"pos_encoding=rope,horizon={horizon}"]
    reference = rows(scratch)[f"pos_encoding=rope,max_steps={horizon}"]
    assert row["status"] == "done" and row["steps"] == str(horizon) and reference["val/loss"]
    assert (row["phase"], row["horizon"], row["parent"]) == ("branch", str(horizon),
                                                             "pos_encoding=rope,horizon=40~stable/seed0")  # fmt: skip
    compared = sorted(set(reference) - NOT_COMPARED)
    assert {k: row[k] for k in compared} == {k: reference[k] for k in compared}


def test_the_stable_run_stops_at_the_longest_decay_start_and_keeps_each_branch_point(sweeps):
    branched, _ = sweeps
    stable = rows(branched)["pos_encoding=rope,horizon=40~stable"]
    assert (stable["status"], stable["steps"], stable["phase"]) == ("done", str(STARTS[40]), "stable")
    kept = branched / "pos_encoding=rope,horizon=40~stable" / "seed0" / "checkpoints"
    assert sorted(p.name for p in kept.glob("step*.ckpt")) == sorted(f"step{s}.ckpt" for s in STARTS.values())
    assert not list(kept.glob(".*part"))
