"""`tune:` with `horizons:` (`experiments.sweep.tuned_branches`), without training: each searched point is one stable
run per tune seed with a search branch at each horizon that asks for it; each horizon chooses its own point, and its
final runs are branches of the chosen point's stable runs at the final seeds (shared with the search where a final
seed is a tune seed)."""

from __future__ import annotations

import pytest
import yaml

from experiments.records.ledger import Ledger
from experiments.sweep.engine import branched_runs
from experiments.sweep.spec import load_spec
from experiments.sweep.validate import CheckedCell
from tests.conftest import BASE, FIXED

SETTINGS = {k: v for k, v in FIXED.items() if k != "trainer.max_steps"} | {"model.optim.schedule": "wsd",
                                                                         "model.optim.warmup_steps": 2}  # fmt: skip
STARTS = {16: 13, 80: 64}  # the default 20% decay
TUNE = {"grid": {"model.optim.lr": [0.001, 0.002, 0.004]}, "extend": 1, "seeds": [0]}
CELL = "pos_encoding=rope"


def plan(tmp_path, ledger=None, **entries):
    spec = {"base": BASE, "fixed": SETTINGS, "grid": {"model.arch.pos_encoding": ["rope"]}, "seeds": [0, 1],
            "horizons": [16, 80], "tune": TUNE} | entries  # fmt: skip
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    spec = load_spec(tmp_path / "s.yaml")
    ledger = ledger or Ledger(tmp_path / "out" / "results.csv", spec.ledger_axes)
    checked = {c.name: CheckedCell(c, (), dict(c.overrides), branch_start=STARTS[c.overrides["trainer.max_steps"]])
               for c in spec.cells}  # fmt: skip
    return spec, ledger, branched_runs(spec, checked, tmp_path / "out", {c.name: 1 for c in spec.cells}, ledger)


def done(ledger, cell, seed, status="done", **values):
    ledger.put({"cell": cell, "seed": str(seed), "status": status, **values})


def stable(lr):
    return f"{CELL},horizon=80~lr={lr}~stable"


def search_branch(horizon, lr):
    return f"{CELL},horizon={horizon}~lr={lr}"


def test_each_point_is_one_stable_run_then_a_search_branch_per_horizon(tmp_path):
    spec, ledger, first = plan(tmp_path)
    assert spec.ledger_axes[-4:] == ("phase", "horizon", "parent", "model.optim.lr")
    assert [(r.cell, r.seed) for r in first.runs] == [(stable(lr), 0) for lr in (0.001, 0.002, 0.004)]
    assert "--model.optim.lr=0.002" in first.runs[1].args and "--trainer.max_steps=80" in first.runs[1].args
    assert dict(first.runs[1].columns) == {"phase": "stable", "horizon": "", "parent": "", "model.optim.lr": "0.002"}

    done(ledger, stable(0.002), 0)
    runs = plan(tmp_path, ledger)[2].runs
    branches = [r for r in runs if r.start_from]
    assert [r.cell for r in branches] == [search_branch(16, 0.002), search_branch(80, 0.002)]
    for run, start in zip(branches, STARTS.values()):
        assert run.start_from == first.runs[1].dir / "checkpoints" / f"step{start}.ckpt" and not run.evaluate
        assert "--model.optim.lr=0.002" in run.args and run.base_cell in spec.cell_by_name
        assert dict(run.columns)["phase"] == "search" and dict(run.columns)["parent"] == f"{stable(0.002)}/seed0"


@pytest.mark.parametrize("seeds", [[0, 1], [5, 6]])
def test_each_horizon_chooses_its_own_point_and_its_final_branches_start_there(tmp_path, seeds):
    spec, ledger, _ = plan(tmp_path, seeds=seeds)
    # the short horizon prefers the highest rate (its edge: one step more is searched, and is worse), the long one
    # the middle rate: each horizon's search runs alone, the stable runs are shared
    losses = {16: {0.001: 3.0, 0.002: 2.5, 0.004: 2.0, 0.008: 2.2}, 80: {0.001: 2.0, 0.002: 1.5, 0.004: 1.8}}
    for lr in (0.001, 0.002, 0.004):
        done(ledger, stable(lr), 0)
    for horizon, by_lr in losses.items():
        for lr, loss in by_lr.items():
            if lr != 0.008:
                done(ledger, search_branch(horizon, lr), 0, **{"val/loss": str(loss)})
    found = plan(tmp_path, ledger, seeds=seeds)[2]
    assert [r.cell for r in found.runs if not r.start_from and r.cell not in {stable(x) for x in losses[80]}] == [
        stable(0.008)]  # the extension: only the short horizon asks for it  # fmt: skip
    done(ledger, stable(0.008), 0)
    found = plan(tmp_path, ledger, seeds=seeds)[2]
    cells = [r.cell for r in found.runs]
    assert search_branch(16, 0.008) in cells and search_branch(80, 0.008) not in cells
    done(ledger, search_branch(16, 0.008), 0, **{"val/loss": "2.2"})

    found = plan(tmp_path, ledger, seeds=seeds)[2]
    finals = [r for r in found.runs if r.evaluate]
    stables = [(r.cell, r.seed) for r in found.runs if r.cell.endswith("~stable")]
    # a final seed that is a tune seed (0) shares the search's stable run; the others get their own, at the chosen
    # points only
    search_stables = [(stable(lr), 0) for lr in (0.001, 0.002, 0.004, 0.008)]
    assert sorted(stables) == sorted({*search_stables, *((stable(lr), s) for lr in (0.004, 0.002) for s in seeds)})
    assert len(found.runs) == len({r.name for r in found.runs})  # each run once
    for lr in (0.004, 0.002):
        for s in seeds:
            done(ledger, stable(lr), s)
    finals = [r for r in plan(tmp_path, ledger, seeds=seeds)[2].runs if r.evaluate]
    assert [(r.cell, r.seed, dict(r.columns)["model.optim.lr"]) for r in finals] == [
        (f"{CELL},horizon={h}", s, lr) for h, lr in ((16, "0.004"), (80, "0.002")) for s in seeds]  # fmt: skip
    assert all(dict(r.columns)["phase"] == "final" and dict(r.columns)["unbracketed"] == "" for r in finals)
    assert finals[0].start_from.parent.parent == tmp_path / "out" / stable(0.004) / f"seed{seeds[0]}"


def test_a_search_branch_whose_stable_run_diverged_counts_as_the_worst_point(tmp_path):
    _, ledger, _ = plan(tmp_path)
    done(ledger, stable(0.004), 0, "diverged", diverged_at_step="5")  # before both decay starts
    found = plan(tmp_path, ledger)[2]
    assert [(row["cell"], row["status"], row["phase"]) for row in found.blocked] == [
        (search_branch(h, 0.004), "diverged", "search") for h in (16, 80)]  # fmt: skip
    found.apply(ledger)
    for lr in (0.001, 0.002):
        done(ledger, stable(lr), 0)
        for horizon in (16, 80):
            done(ledger, search_branch(horizon, lr), 0, **{"val/loss": str(2.0 - lr * 100)})
    runs = plan(tmp_path, ledger)[2].runs  # 0.004 diverged: the worst point, which closes the range above 0.002
    assert [(r.cell, r.seed) for r in runs if r.evaluate] == [(f"{CELL},horizon={h}", 0) for h in (16, 80)]
    assert (stable(0.002), 1) in [(r.cell, r.seed) for r in runs]  # seed 1's final branches wait for it
