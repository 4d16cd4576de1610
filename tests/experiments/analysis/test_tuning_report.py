"""The tuning section's numbers (`experiments.analysis.tuning_report`) on a hand-made search."""

from __future__ import annotations

import math

import pytest

from experiments.analysis.tuning_report import (
    CellSearch,
    counterparts,
    searches,
    seed_range,
    sensitivity,
    tuning_section,
)
from experiments.records.ledger import Ledger

GRID = [(1e-3,), (3e-3,), (1e-2,)]


def test_sensitivity_is_the_mean_capped_excess_over_the_best():
    """Wortsman et al.: mean over the grid of min(loss, cap) − best; a diverged point counts as the cap."""
    search = CellSearch("a", {(1e-3,): [2.0], (3e-3,): [1.5], (1e-2,): [math.nan], (3e-2,): [1.4]})
    expected = ((2.0 - 1.4) + (1.5 - 1.4) + (3.0 - 1.4)) / 3  # the best (1.4) lies outside the initial grid
    assert sensitivity(search, GRID, cap=3.0, higher=False) == pytest.approx(expected)
    flat = CellSearch("b", {p: [1.0] for p in GRID})
    assert sensitivity(flat, GRID, cap=3.0, higher=False) == 0.0


def test_sensitivity_for_a_metric_where_higher_is_better():
    search = CellSearch("a", {(1e-3,): [0.5], (3e-3,): [0.9], (1e-2,): [0.7]})
    assert sensitivity(search, GRID, cap=0.5, higher=True) == pytest.approx((0.4 + 0.0 + 0.2) / 3)


def test_a_chosen_value_at_an_end_of_what_was_searched_is_unbracketed():
    points = {(1e-3, 10.0): [1.0], (3e-3, 10.0): [0.9], (3e-3, 100.0): [0.8]}
    assert CellSearch("a", points, chosen=(3e-3, 100.0)).unbracketed(["lr", "scale"]) == ["lr", "scale"]
    assert CellSearch("a", points | {(1e-2, 100.0): [1.0]}, chosen=(3e-3, 100.0)).unbracketed(["lr", "scale"]) == [
        "scale"
    ]
    assert CellSearch("a", points).unbracketed(["lr", "scale"]) == []  # not chosen yet


def test_what_the_engine_recorded_open_wins_over_the_edges():
    """A ledger with the `unbracketed` column: the engine's rule (an interior best whose edge still improves is
    open) is what the report says; an older ledger falls back to the edges."""
    points = {(1e-3,): [1.0], (3e-3,): [0.8], (1e-2,): [0.95], (3e-2,): [0.9]}
    assert CellSearch("a", points, chosen=(3e-3,), open_keys=("lr",)).unbracketed(["lr"]) == ["lr"]
    assert CellSearch("a", points, chosen=(3e-3,), open_keys=()).unbracketed(["lr"]) == []
    assert CellSearch("a", points, chosen=(3e-3,)).unbracketed(["lr"]) == []  # older ledger: interior is bracketed


def test_a_cell_that_shared_a_search_names_its_counterpart(tmp_path):
    """`tune.search_on`: the length-split cell ran at the simple split's choice; its row says so instead of
    showing an empty search as bracketed."""
    cells = [{"name": "split=simple", "overrides": {"data.split": "simple"}},
             {"name": "split=length", "overrides": {"data.split": "length"}}]  # fmt: skip
    tune = {"grid": {"model.optim.lr": [1e-3, 3e-3, 1e-2]}, "extend": 1, "metric": "val/loss", "seeds": [10]}
    info = {"cells": cells, "tune": tune | {"search_on": {"data.split": "simple"}}}
    assert counterparts(info) == {"split=length": "split=simple"}
    ledger = Ledger(tmp_path / "results.csv", ("phase", "model.optim.lr"))
    for lr, loss in ((1e-3, 2.0), (3e-3, 1.5), (1e-2, 1.8)):
        ledger.put({"cell": f"split=simple~lr={lr}", "seed": "10", "status": "done", "phase": "search",
                    "model.optim.lr": repr(lr), "val/loss": repr(loss)})  # fmt: skip
    for cell in ("split=simple", "split=length"):
        ledger.put({"cell": cell, "seed": "0", "status": "done", "phase": "final", "model.optim.lr": "0.003"})
    text, _ = tuning_section(tmp_path, ledger, info)
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| `split")}
    assert rows["| `split=length`"] == "| `split=length` | 0.003 | on `split=simple` | — | — | — |"
    assert rows["| `split=simple`"].endswith("| yes |")
    assert "only the cells with {'data.split': 'simple'} searched" in text


def test_several_tune_seeds_give_the_sensitivity_a_range():
    one = CellSearch("a", {p: [v] for p, v in zip(GRID, (1.2, 1.0, 1.3))}, chosen=(3e-3,))
    two = CellSearch("a", {p: [v, v + d] for p, v, d in zip(GRID, (1.2, 1.0, 1.3), (0.3, 0.0, -0.2))}, chosen=(3e-3,))
    assert seed_range(one, GRID, 2.0, False) == ""  # one seed cannot say how noisy its sensitivity is
    # seed 0: mean of (0.2, 0, 0.3) = 0.1667; seed 1: (0.5, 0, 0.1) = 0.2
    assert seed_range(two, GRID, 2.0, False) == " (seeds 0.1667–0.2000)"


def test_each_seeds_sensitivity_pairs_its_own_runs_whatever_order_they_finished_in(tmp_path):
    """The ledger lists runs as they ended, so seed 11 may come first at one point and last at another: each
    seed's sensitivity must still read that seed's value at every point (and none while a point lacks one)."""
    ledger = Ledger(tmp_path / "results.csv", ("phase", "model.optim.lr"))
    losses = {10: (1.2, 1.0, 1.3), 11: (1.5, 1.0, 1.1)}  # seed 10: mean excess 0.1667; seed 11: 0.2
    order = [(0, 11), (0, 10), (1, 10), (1, 11), (2, 11)]  # point 2's seed 10 not in yet
    for i, seed in order:
        ledger.put({"cell": f"a~lr={GRID[i][0]}", "seed": str(seed), "status": "done", "phase": "search",
                    "model.optim.lr": repr(GRID[i][0]), "val/loss": repr(losses[seed][i])})  # fmt: skip
    info = {"cells": [{"name": "a", "overrides": {}}], "tune": {"grid": {"model.optim.lr": [p[0] for p in GRID]},
                                                                 "metric": "val/loss"}}  # fmt: skip
    _, _, found = searches(ledger, info)
    assert seed_range(found["a"], GRID, 2.0, False) == ""  # a point lacks seed 10: no per-seed reading yet
    ledger.put({"cell": f"a~lr={GRID[2][0]}", "seed": "10", "status": "done", "phase": "search",
                "model.optim.lr": repr(GRID[2][0]), "val/loss": repr(losses[10][2])})  # fmt: skip
    _, _, found = searches(ledger, info)
    assert found["a"].points[GRID[0]] == [1.2, 1.5] and found["a"].points[GRID[2]] == [1.3, 1.1]
    assert seed_range(found["a"], GRID, 2.0, False) == " (seeds 0.1667–0.2000)"


def test_a_search_still_running_has_no_sensitivity_yet(tmp_path):
    """A point not yet run is not a diverged one: while a cell searches (no final runs), its row gives no
    sensitivity (counting the missing points at the cap gave 0.38 for a running cell that ended near 0.04)."""
    ledger = Ledger(tmp_path / "results.csv", ("phase", "model.optim.lr"))
    info = {"cells": [{"name": "a", "overrides": {}}], "tune": {"grid": {"model.optim.lr": [p[0] for p in GRID]},
                                                                 "metric": "val/loss", "seeds": [10]}}  # fmt: skip
    for i, loss in ((0, 2.0), (1, 1.5)):
        ledger.put({"cell": f"a~lr={GRID[i][0]}", "seed": "10", "status": "done", "phase": "search",
                    "model.optim.lr": repr(GRID[i][0]), "val/loss": repr(loss)})  # fmt: skip
    row = next(line for line in tuning_section(tmp_path, ledger, info)[0].splitlines() if line.startswith("| `a`"))
    assert row.endswith("| n/a | n/a | search not finished |"), row
    ledger.put({"cell": f"a~lr={GRID[2][0]}", "seed": "10", "status": "diverged", "phase": "search",
                "model.optim.lr": repr(GRID[2][0])})  # fmt: skip
    ledger.put({"cell": "a", "seed": "0", "status": "done", "phase": "final", "model.optim.lr": repr(GRID[1][0])})
    row = next(line for line in tuning_section(tmp_path, ledger, info)[0].splitlines() if line.startswith("| `a`"))
    assert "| 0.3333 | yes |" in row, row  # ((2.0 − 1.5) + 0 + (cap 2.0 − 1.5)) / 3: the diverged point at the cap
