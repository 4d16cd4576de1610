"""The tuned PEFT verdicts follow their spec's rule, on a synthetic tuned ledger (no training)."""

from __future__ import annotations

import json

from experiments.records.ledger import Ledger
from experiments.studies.peft import tuned_verdict

GRID = [1e-3, 3e-3, 1e-2, 3e-2, 1e-1]
CHOSEN = {"full": 1e-2, "lora_r1": 3e-2, "lora_r4": 3e-2, "lora_r16": 3e-2, "adapter": 3e-2, "bitfit": 1e-1,
          "head_only": 1e-2}  # fmt: skip
FINAL = {  # test/loss by seed
    "full": [2.00, 2.02, 2.01],
    "lora_r1": [2.30, 2.35, 2.32],  # clearly worse than full
    "lora_r4": [2.304, 2.352, 2.323],  # r4 − r16 ≈ −0.004 ± 0.002: below the margin, though its CI may exclude 0
    "lora_r16": [2.308, 2.355, 2.326],
    "adapter": [2.005, 2.025, 2.012],  # within ±0.02 of full, CI tight: matches
    "bitfit": [1.90, 1.93, 1.91],  # clearly better
    "head_only": [1.95, 2.10, 2.00],  # noisy, containing 0: inconclusive
}


def write_sweep(out, chosen=CHOSEN):
    info = {"cells": [{"name": n, "overrides": {}} for n in chosen], "baseline": "full",
            "tune": {"grid": {"model.optim.lr": GRID}, "extend": 2, "metric": "val/loss", "seeds": [10]}}  # fmt: skip
    (out / "sweep.json").write_text(json.dumps(info))
    ledger = Ledger(out / "results.csv", ("phase", "model.optim.lr"))
    for cell, best in chosen.items():
        for lr in GRID:  # a valley at the chosen lr
            loss = repr(2.0 + abs(GRID.index(lr) - GRID.index(best)) * 0.1)
            ledger.put({"cell": f"{cell}~lr={lr}", "seed": "10", "status": "done", "phase": "search",
                        "model.optim.lr": repr(lr), "val/loss": loss})  # fmt: skip
        for seed, value in enumerate(FINAL[cell]):
            ledger.put({"cell": cell, "seed": str(seed), "status": "done", "phase": "final",
                        "model.optim.lr": repr(best), "test/loss": repr(value)})  # fmt: skip
    return out


def rows(sweep_dir):
    return {line.split(" | ")[0].strip("| "): line for line in tuned_verdict.table(sweep_dir).splitlines()}


def test_each_comparison_is_labelled_by_the_stated_rule(tmp_path):
    table = rows(write_sweep(tmp_path))
    assert table["lora_r1 − full"].endswith("| worse |")
    assert table["adapter − full"].endswith("| matches |")
    assert table["bitfit − full"].endswith("| inconclusive by the bracketing rule |")  # its lr: the top searched
    assert table["head_only − full"].endswith("| inconclusive |")
    assert table["lora_r4 − lora_r16"].endswith("| matches |")  # equivalence first: below the margin is a match
    assert "| 0.03 vs 0.01 |" in table["lora_r1 − full"]


def test_a_choice_at_the_searched_edge_is_flagged(tmp_path):
    table = rows(write_sweep(tmp_path))  # bitfit chose 0.1, the highest value searched
    assert "(unbracketed: bitfit)" in table["bitfit − full"]
    assert "unbracketed" not in table["adapter − full"]


def test_a_method_at_the_pre_trained_loss_is_inconclusive_by_the_floor_rule(tmp_path, monkeypatch):
    """A fine-tune whose test loss never left the pre-trained model's (`STARTS`) learned nothing: comparing it
    says nothing about the method, so its comparisons are inconclusive by the floor rule, the others unchanged."""
    out = write_sweep(tmp_path)
    info = json.loads((out / "sweep.json").read_text()) | {"spec": "experiments/studies/peft/peft_bert_tuned.yaml"}
    (out / "sweep.json").write_text(json.dumps(info))
    monkeypatch.setitem(tuned_verdict.STARTS, "peft_bert_tuned.yaml", 2.31)  # lora_r1, r4, r16 sit at it
    table = rows(out)
    assert table["lora_r4 − lora_r16"].endswith("| inconclusive by the floor rule |")
    assert table["lora_r4 − full"].endswith("| inconclusive by the floor rule |")
    assert table["adapter − full"].endswith("| matches |")
    assert "2.326 ± 0.024 (floor)" in table["lora_r4"]
    assert "(floor)" not in table["adapter"]


def test_no_verdict_before_the_final_runs(tmp_path):
    (tmp_path / "sweep.json").write_text(json.dumps({"tune": {"grid": {"model.optim.lr": GRID}, "metric": "val/loss"}}))
    Ledger(tmp_path / "results.csv").write()
    assert "have not ended" in tuned_verdict.table(tmp_path)
