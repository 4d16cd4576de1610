"""Study 22's verdicts follow `norm_placement_budget.yaml`'s rules, on a synthetic ledger (no training): Pre-LN's
warmup gain and Post-LN's deficit compared between the shortest and longest horizons seed by seed, and the gain at
the longest horizon against ±0.03."""

from __future__ import annotations

import json

import pytest

from experiments.records.ledger import Ledger
from experiments.studies.norm_placement import budget_verdict as verdict

HORIZONS = (800, 3200, 12800)
NOISE = {0: 0.0, 1: 0.01, 2: -0.006}
JITTER = {0: 0.001, 1: -0.002, 2: 0.001}
AMOUNT = {"pre-warmup0": 1, "pre-warmup200": 2, "post-warmup200": 3}


def write(out, losses: dict[str, dict[int, float]], open_cell=None):
    """losses: cell -> horizon -> test loss (plus per-seed noise shared by all cells and a little of each's own)."""
    out.mkdir(parents=True, exist_ok=True)
    names = {(c, h): f"{c},horizon={h}" for c in losses for h in HORIZONS}
    tune = {"grid": {"model.optim.lr": [3e-4, 1e-3]}, "extend": 4, "metric": "val/loss", "seeds": [10]}
    info = {"cells": [{"name": n, "overrides": {}} for n in names.values()], "tune": tune,
            "horizons": {"steps": list(HORIZONS), "cells": {n: [c, h] for (c, h), n in names.items()}}}  # fmt: skip
    (out / "sweep.json").write_text(json.dumps(info))
    ledger = Ledger(out / "results.csv", ("phase", "model.optim.lr", "unbracketed"))
    for (cell, h), name in names.items():
        ledger.put({"cell": f"{name}~lr=0.001", "seed": "10", "status": "done", "phase": "search",
                    "model.optim.lr": "0.001", "val/loss": "2.0"})  # fmt: skip
        for seed in NOISE:
            loss = losses[cell][h] + NOISE[seed] + JITTER[seed] * AMOUNT[cell] * (1 + HORIZONS.index(h))
            ledger.put({"cell": name, "seed": str(seed), "status": "done", "phase": "final", "model.optim.lr": "0.001",
                        "unbracketed": "model.optim.lr" if open_cell == (cell, h) else "",
                        "test/loss": repr(loss)})  # fmt: skip
    return out


def claim(lines, start):
    return next(line for line in lines if line.startswith(f"- **{start}"))


XIONG = {  # the gain and the deficit fade; without warmup Pre-LN is level at 12,800
    "pre-warmup0": {800: 2.30, 3200: 1.90, 12800: 1.601},
    "pre-warmup200": {800: 2.00, 3200: 1.85, 12800: 1.600},
    "post-warmup200": {800: 2.20, 3200: 1.95, 12800: 1.65},
}
STEADY = {  # the same gain and deficit at every length
    "pre-warmup0": {800: 2.30, 3200: 2.15, 12800: 1.90},
    "pre-warmup200": {800: 2.00, 3200: 1.85, 12800: 1.60},
    "post-warmup200": {800: 2.20, 3200: 2.05, 12800: 1.80},
}


@pytest.mark.parametrize(("losses", "label"), [(XIONG, "reproduced"), (STEADY, "not reproduced")])
def test_each_claim_by_its_rule(tmp_path, losses, label):
    lines = verdict.verdicts(write(tmp_path, losses))
    assert f"warmup gain shrinks as training lengthens: {label}." in claim(lines, "Pre-LN's warmup gain")
    assert f"deficit shrinks as training lengthens: {label}." in claim(lines, "Post-LN's deficit")
    assert f"needs no warmup at 12,800 steps: {label}." in claim(lines, "Pre-LN needs no warmup")
    assert lines[-3].startswith("| pre-warmup0 | 0.001, 2.30")


def test_an_unbracketed_cell_at_an_end_horizon_is_inconclusive_by_rule(tmp_path):
    losses = {c: {h: 2.0 for h in HORIZONS} for c in AMOUNT} | {"pre-warmup0": {800: 2.3, 3200: 2.0, 12800: 2.0}}
    lines = verdict.verdicts(write(tmp_path, losses, open_cell=("pre-warmup200", 12800)))
    assert "shrinks as training lengthens: inconclusive by the bracketing rule." in claim(lines, "Pre-LN's warmup")
    assert "(unbracketed: pre-warmup200,horizon=12800 (lr))" in claim(lines, "Pre-LN needs no warmup")


def test_the_command_writes_the_verdicts_and_the_gaps_plot_once_every_final_run_is_in(tmp_path):
    folder = write(tmp_path / "sweep", XIONG)
    ledger = Ledger(folder / "results.csv")
    held = {seed: ledger.get("post-warmup200,horizon=3200", seed) for seed in NOISE}
    for seed in NOISE:  # a cell with its final runs still to come: the verdict waits, and no plot
        ledger.remove("post-warmup200,horizon=3200", seed)
    assert verdict.main([str(folder)]) == 0
    assert (folder / "budget_verdict.md").read_text().startswith("- no final runs yet for post-warmup200 at 3200")
    assert not (folder / "budget_gaps.png").exists()
    for row in held.values():
        ledger.put(row)
    assert verdict.main([str(folder)]) == 0
    assert (folder / "budget_verdict.md").read_text() == "\n".join(verdict.verdicts(folder)) + "\n"
    assert (folder / "budget_gaps.png").read_bytes().startswith(b"\x89PNG")
