"""The QK-norm / z-loss verdict follows its spec's rule, on a synthetic tuned ledger (no training)."""

from __future__ import annotations

import json

from experiments.analysis import sweep_results
from experiments.records.ledger import Ledger
from experiments.studies.stability import verdict

GRID = [1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1]
CELLS = [(qk, z) for qk in ("none", "layernorm") for z in ("0.0", "0.0001")]
SIZES = ("d64", "d128")


def name(qk: str, z: str, size: str) -> str:
    return f"qk_norm={qk},z_loss={z},size={size}"


def write_sweep(out, fails_above: dict, final_shift: dict, valley: dict | None = None):
    """Search: a valley at 1e-2 (or the cell's `valley` lr), +0.1 per grid step away from it; a cell diverges above
    its `fails_above` lr.
    Final: test/loss 1.50 (+ the cell's shift) with a little seed noise."""
    names = [name(qk, z, size) for size in SIZES for qk, z in CELLS]
    info = {"cells": [{"name": n, "overrides": {}} for n in names],
            "tune": {"grid": {"model.optim.lr": GRID}, "extend": 0, "metric": "val/loss", "seeds": [10]}}  # fmt: skip
    (out / "sweep.json").write_text(json.dumps(info))
    ledger = Ledger(out / "results.csv", ("phase", "model.optim.lr"))
    for size in SIZES:
        for qk, z in CELLS:
            cell = name(qk, z, size)
            for lr in GRID:
                diverged = lr > fails_above.get((qk, z), 1.0)
                best = GRID.index((valley or {}).get((qk, z, size), 1e-2))
                loss = "" if diverged else repr(2.0 + abs(GRID.index(lr) - best) * 0.1)
                ledger.put({"cell": f"{cell}~lr={lr}", "seed": "10", "status": "diverged" if diverged else "done",
                            "phase": "search", "model.optim.lr": repr(lr), "val/loss": loss,
                            "diagnostics/attn_max_logit": repr(10 * lr if qk == "none" else 2.0),
                            "diagnostics/log_z": "4.2"})  # fmt: skip
            for seed, noise in enumerate((0.0, 0.004, -0.004)):
                shown = repr(1.5 + final_shift.get((qk, z), 0) + noise)
                ledger.put({"cell": cell, "seed": str(seed), "status": "done", "phase": "final",
                            "model.optim.lr": repr(GRID[best]), "test/loss": shown, "val/loss": shown})  # fmt: skip
    return out


def test_each_claim_is_labelled_by_the_stated_rule(tmp_path):
    # without QK-norm the loss diverges above 1e-2; with it, it survives the whole grid; z-loss alone does not help
    fails = {("none", "0.0"): 1e-2, ("none", "0.0001"): 1e-2, ("layernorm", "0.0001"): 1.0}
    lines = verdict.verdicts(write_sweep(tmp_path, fails, {}))
    assert lines[0].startswith("- **QK-layernorm lowers LR sensitivity: reproduced.**")
    assert lines[1].startswith("- **z-loss lowers LR sensitivity: not reproduced.**")  # equal at both sizes
    assert lines[2].startswith("- **Neither costs loss at its best rate: reproduced.**")
    table = "\n".join(lines[4:])
    assert "| d64 | none | 0.0 | attn_max_logit | 0.01 | 0.03 | 0.10 | 0.30† | 1.00† | 3.00† |" in table


def test_a_sensitivity_difference_within_the_noise_is_inconclusive(tmp_path, monkeypatch):
    """z-loss's sensitivity a hair above the baseline's is not evidence that it does not lower it when the seeds'
    noise is larger than the gap: inconclusive, where the pre-registered "≥ baseline" alone said not reproduced."""
    fails = {("none", "0.0"): 1e-2, ("none", "0.0001"): 1e-2}
    quiet = verdict.verdicts(write_sweep(tmp_path, fails, {}))
    assert quiet[1].startswith("- **z-loss lowers LR sensitivity: not reproduced.**")  # equal, beyond the noise of 0.9×
    monkeypatch.setattr(sweep_results, "sensitivity_allowance", lambda spread, seeds, points: 0.5)
    noisy = verdict.verdicts(write_sweep(tmp_path, fails, {}))
    assert noisy[1].startswith("- **z-loss lowers LR sensitivity: inconclusive.**") and "±0.500" in noisy[1]


def test_a_claim_touching_a_cell_whose_best_is_an_end_of_the_grid_is_inconclusive(tmp_path):
    """The grid does not extend, so a best at 1e-3 may have a better value below it: QK-layernorm at d128 choosing
    the grid's bottom makes both claims that touch it inconclusive by the bracketing rule, with the cell named."""
    fails = {("none", "0.0"): 1e-2, ("none", "0.0001"): 1e-2, ("layernorm", "0.0001"): 1.0}
    lines = verdict.verdicts(write_sweep(tmp_path, fails, {}, {("layernorm", "0.0", "d128"): 1e-3}))
    assert lines[0].startswith("- **QK-layernorm lowers LR sensitivity: inconclusive by the bracketing rule.**")
    assert "unbracketed: qk_norm=layernorm,z_loss=0.0,size=d128 (lr)" in lines[0]
    assert lines[1].startswith("- **z-loss lowers LR sensitivity: not reproduced.**")  # untouched by that cell
    assert lines[2].startswith("- **Neither costs loss at its best rate: inconclusive by the bracketing rule.**")


def test_a_cost_at_the_best_rate_is_not_reproduced(tmp_path):
    lines = verdict.verdicts(write_sweep(tmp_path, {("none", "0.0"): 1e-2}, {("layernorm", "0.0"): 0.1}))
    assert lines[2].startswith("- **Neither costs loss at its best rate: not reproduced.**")


def test_the_mechanism_table_shows_the_first_search_seed(tmp_path):
    """With several search seeds, each cell and lr has one run per seed: the table shows the first seed's (the one
    a single-seed study ran), whatever order the ledger holds them in."""
    out = write_sweep(tmp_path, {("none", "0.0"): 1e-2}, {})
    ledger = Ledger(out / "results.csv", ("phase", "model.optim.lr"))
    for lr in GRID:
        ledger.put({"cell": f"{name('none', '0.0', 'd64')}~lr={lr}", "seed": "11", "status": "done",
                    "phase": "search", "model.optim.lr": repr(lr), "val/loss": "2.5",
                    "diagnostics/attn_max_logit": "999.0", "diagnostics/log_z": "9.9"})  # fmt: skip
    table = "\n".join(verdict.verdicts(out)[4:])
    assert "| d64 | none | 0.0 | attn_max_logit | 0.01 | 0.03 | 0.10 | 0.30† | 1.00† | 3.00† |" in table
    assert "999.00" not in table


def test_no_verdict_before_the_final_runs(tmp_path):
    (tmp_path / "sweep.json").write_text(json.dumps({"tune": {"grid": {"model.optim.lr": GRID}, "metric": "val/loss"}}))
    Ledger(tmp_path / "results.csv").write()
    assert "have not ended" in verdict.verdicts(tmp_path)[0]
