"""The tuned MLM positional verdict follows its specs' rule, on synthetic tuned ledgers (no training)."""

from __future__ import annotations

import json

from experiments.records.ledger import Ledger
from experiments.studies.mlm_positional import tuned_verdict

GRID = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2]
PLATEAU = {"learned": [3.03, 3.04, 3.02], "none": [3.03, 3.035, 3.03], "rope": [1.50, 1.52, 1.51]}


def write_sweep(out, final, chosen, keys=("model.optim.lr",)):
    out.mkdir(parents=True, exist_ok=True)
    grid = {k: GRID for k in keys}
    info = {"cells": [{"name": f"pos_encoding={n}", "overrides": {}} for n in final],
            "tune": {"grid": grid, "extend": 1, "metric": "val/loss", "seeds": [10]}}  # fmt: skip
    (out / "sweep.json").write_text(json.dumps(info))
    ledger = Ledger(out / "results.csv", ("phase", *keys))
    for name, values in final.items():
        cell = f"pos_encoding={name}"
        for lr in GRID:  # a valley at the chosen lr (every tuned key at the same value, for brevity)
            loss = repr(3.0 + abs(GRID.index(lr) - GRID.index(chosen[name])) * 0.1)
            ledger.put({"cell": f"{cell}~lr={lr}", "seed": "10", "status": "done", "phase": "search",
                        **{k: repr(lr) for k in keys}, "val/loss": loss})  # fmt: skip
        for seed, value in enumerate(values):
            ledger.put({"cell": cell, "seed": str(seed), "status": "done", "phase": "final",
                        **{k: repr(chosen[name]) for k in keys}, "test/loss": repr(value)})  # fmt: skip
    return out


def test_a_plateau_at_tuned_rates_survives_and_rope_is_compared(tmp_path):
    tuned = write_sweep(tmp_path / "tuned", PLATEAU, {"learned": 3e-3, "none": 1e-3, "rope": 1e-3})
    lines = tuned_verdict.verdicts(tuned)
    assert lines[0].startswith("- **The learned-position plateau survives tuning.**")
    assert "learned: lr 0.003" in lines[0]
    assert lines[1].startswith("- RoPE − learned") and "-1.520" in lines[1]


def test_learned_leaving_the_plateau_is_an_lr_artefact_and_the_table_rate_is_read(tmp_path):
    left = PLATEAU | {"learned": [2.10, 2.20, 2.15]}
    tuned = write_sweep(tmp_path / "tuned", left, {"learned": 1e-2, "none": 1e-3, "rope": 1e-3})
    scale = write_sweep(tmp_path / "scale", {"learned": [1.90, 1.97, 1.93]}, {"learned": 1e-3},
                        keys=("model.optim.lr", "model.optim.positional_lr_scale"))  # fmt: skip
    lines = tuned_verdict.verdicts(tuned, scale)
    # 1e-2 is the top of what learned searched: a better rate may lie beyond, so neither reading is drawn
    assert lines[0].startswith("- **The learned-position plateau is inconclusive by the bracketing rule "
                               "(unbracketed: pos_encoding=learned (lr)).**")  # fmt: skip
    assert "lr 0.01 (unbracketed: model.optim.lr)" in lines[0]
    assert lines[2].startswith("- **The plateau is inconclusive by the bracketing rule (unbracketed: "
                               "pos_encoding=learned (tuned) (lr)).**")  # fmt: skip
    tuned = write_sweep(tmp_path / "bracketed", left, {"learned": 3e-3, "none": 1e-3, "rope": 1e-3})
    lines = tuned_verdict.verdicts(tuned, scale)
    assert lines[0].startswith("- **The learned-position plateau is an lr artefact.**")
    assert lines[2].startswith("- **The plateau is a step-size artefact of the table.**")
    assert "positional_lr_scale 0.001" in lines[2]


def test_no_verdict_before_the_final_runs(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "sweep.json").write_text(json.dumps({"tune": {"grid": {"model.optim.lr": GRID}, "metric": "val/loss"}}))
    Ledger(empty / "results.csv").write()
    assert "have not ended" in tuned_verdict.verdicts(empty)[0]
    tuned = write_sweep(tmp_path / "tuned", PLATEAU, {"learned": 3e-3, "none": 1e-3, "rope": 1e-3})
    lines = tuned_verdict.verdicts(tuned, empty)  # the table's search still running: two verdicts of three
    assert len(lines) == 3 and "no verdict on the table's step size yet" in lines[2]
