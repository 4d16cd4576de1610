"""The Peri-LN verdict follows its spec's rule, on a synthetic tuned ledger (no training)."""

from __future__ import annotations

import json

from experiments.records.ledger import Ledger
from experiments.studies.peri_ln import verdict

DEPTHS = ("L4", "L8")
NOISE = (0.0, 0.01, -0.01)


GRID = [1e-3, 2e-3, 4e-3]


def write_sweep(out, loss: dict, growth: dict, spikes: dict | None = None, placements=verdict.PLACEMENTS, at_edge=()):
    """Each (placement, depth)'s search over `GRID` (its best the middle, or the top for those in `at_edge`:
    unbracketed), and its final runs' test/loss, growth and spike count."""
    out.mkdir(exist_ok=True)
    names = [f"norm_placement={p},size={d}" for d in DEPTHS for p in placements]
    tune = {"grid": {"model.optim.lr": GRID}, "extend": 0, "metric": "val/loss", "seeds": [10]}
    (out / "sweep.json").write_text(json.dumps({"cells": [{"name": n, "overrides": {}} for n in names], "tune": tune}))
    ledger = Ledger(out / "results.csv", ("phase", "model.optim.lr"))
    for d in DEPTHS:
        for p in placements:
            best = GRID[-1] if (p, d) in at_edge else GRID[1]
            for lr in GRID:
                ledger.put(
                    {
                        "cell": f"norm_placement={p},size={d}~lr={lr}",
                        "seed": "10",
                        "status": "done",
                        "phase": "search",
                        "model.optim.lr": repr(lr),
                        "val/loss": repr(2 + abs(lr - best)),
                    }
                )
            for seed, noise in enumerate(NOISE):
                ledger.put({"cell": f"norm_placement={p},size={d}", "seed": str(seed), "status": "done",
                            "phase": "final", "model.optim.lr": repr(best), "test/loss": repr(loss[p] + noise),
                            "diagnostics/residual_growth": repr(growth[p] + noise),
                            "loss_spikes": str((spikes or {}).get((p, d), 0))})  # fmt: skip
    return out


def _bullets(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("- ")]


LOSS = {"pre": 1.60, "peri": 1.55, "post": 1.70, "reordered": 1.58}
GROWTH = {"pre": 1.5, "peri": 0.2, "post": 0.0, "reordered": 0.4}


def test_each_claim_is_labelled_by_the_stated_rule(tmp_path):
    lines = verdict.verdicts(write_sweep(tmp_path, LOSS, GROWTH, {("pre", "L4"): 1, ("pre", "L8"): 2}))
    assert lines[0].startswith("- **Peri-LN beats Pre-LN: reproduced.**")
    assert lines[1].startswith("- **Peri-LN keeps the residual stream from growing with depth: reproduced.**")
    assert lines[2].startswith("- **Pre-LN spikes more: reproduced.**")
    assert "L8: 6 against 0" in lines[2]  # 2 in each of its 3 runs
    assert lines[3].startswith("- post − Pre") and lines[4].startswith("- reordered − Pre")
    table = lines[lines.index("") + 1 :]
    assert table[0].startswith("| placement | L4 test/loss | Δ vs pre | growth | lr |")
    assert table[2] == "| pre | 1.600 ± 0.010 |  | +1.50 | 0.002 | 1.600 ± 0.010 |  | +1.50 | 0.002 |"
    assert table[3].startswith("| peri | 1.550 ± 0.010 | -0.050 | +0.20 | 0.002 |")


def test_without_spikes_and_with_a_peri_loss_the_labels_follow(tmp_path):
    lines = verdict.verdicts(write_sweep(tmp_path, LOSS | {"peri": 1.70}, GROWTH))
    assert lines[0].startswith("- **Peri-LN beats Pre-LN: not reproduced.**")
    assert lines[2].startswith("- **Pre-LN spikes more: inconclusive.**")  # neither spikes


def test_an_unbracketed_pre_ln_makes_every_claim_against_it_inconclusive_by_rule(tmp_path):
    """Pre-LN chose its grid's top at both depths: a better Pre-LN rate may lie beyond, so "Peri-LN beats Pre-LN"
    is inconclusive by the bracketing rule though its CIs lie below 0; the other placements' lines say so too."""
    edge = {("pre", "L4"), ("pre", "L8")}
    lines = verdict.verdicts(write_sweep(tmp_path, LOSS, GROWTH, {("pre", "L4"): 1, ("pre", "L8"): 2}, at_edge=edge))
    assert lines[0].startswith("- **Peri-LN beats Pre-LN: inconclusive by the bracketing rule.** (unbracketed: "
                               "pre@L4 (lr), pre@L8 (lr))")  # fmt: skip
    assert lines[1].startswith("- **Peri-LN keeps the residual stream from growing with depth: inconclusive by the "
                               "bracketing rule.**")  # fmt: skip
    assert lines[2].startswith("- **Pre-LN spikes more: inconclusive by the bracketing rule.**")
    assert "(unbracketed: pre@L8 (lr))." in lines[3]  # post − Pre, not a claim, flagged
    lines = verdict.verdicts(write_sweep(tmp_path, LOSS, GROWTH, at_edge={("pre", "L4")}))
    assert lines[0].startswith("- **Peri-LN beats Pre-LN: inconclusive by the bracketing rule.** (unbracketed: "
                               "pre@L4 (lr))")  # L8 alone reproduces; the claim needs both depths  # fmt: skip


def test_no_verdict_before_the_final_runs(tmp_path):
    (tmp_path / "sweep.json").write_text(json.dumps({}))
    Ledger(tmp_path / "results.csv").write()
    assert "have not ended" in verdict.verdicts(tmp_path)[0]


def test_a_post_hoc_folder_stands_in_for_its_cells_and_is_labelled(tmp_path):
    """A post hoc Peri-LN (here one that fixes a losing build) is judged by the same rule against the
    pre-registered Pre-LN runs, paired by seed, below the pre-registered verdict, which it never changes."""
    pre_registered = write_sweep(tmp_path / "peri_ln", LOSS | {"peri": 1.70}, GROWTH)
    fixed = write_sweep(tmp_path / "peri_fixed", {"peri": 1.50}, {"peri": 0.1}, placements=("peri",))
    alone = _bullets(verdict.verdicts(pre_registered))
    lines = verdict.verdicts(pre_registered, fixed)
    assert _bullets(lines)[: len(alone)] == alone and alone[0].startswith("- **Peri-LN beats Pre-LN: not reproduced.**")
    post_hoc = _bullets(lines)[len(alone) :]
    assert lines[-1].startswith("| peri, post hoc (peri_fixed) | 1.500 ± 0.010 | -0.100 | +0.10 |")
    assert post_hoc[0].startswith("- **Post hoc (peri_fixed): Peri-LN beats Pre-LN: reproduced.**")
    assert "L4: -0.100 [" in post_hoc[0]  # 1.50 − 1.60, against the pre-registered Pre-LN
    assert post_hoc[-1].startswith("- Post hoc (peri_fixed): its peri − the pre-registered one")
    assert "L8: -0.200 [" in post_hoc[-1]


def test_a_post_hoc_folder_without_final_runs_gives_no_verdict(tmp_path):
    pre_registered = write_sweep(tmp_path / "peri_ln", LOSS, GROWTH)
    pending = tmp_path / "peri_pending"
    pending.mkdir()
    (pending / "sweep.json").write_text(json.dumps({}))
    Ledger(pending / "results.csv").write()
    assert "have not ended" in _bullets(verdict.verdicts(pre_registered, pending))[-1]


def test_a_post_hoc_placement_other_than_peri_is_compared_with_pre_ln(tmp_path):
    pre_registered = write_sweep(tmp_path / "peri_ln", LOSS, GROWTH)
    other = write_sweep(tmp_path / "reordered_qk", {"reordered": 1.62}, {"reordered": 0.3}, placements=("reordered",))
    post_hoc = _bullets(verdict.verdicts(pre_registered, other))[len(_bullets(verdict.verdicts(pre_registered))) :]
    assert [line.split(":")[1] for line in post_hoc] == [
        " reordered − Pre on test/loss",
        " its reordered − the pre-registered one on test/loss, paired by seed",
    ]
    assert "L4: +0.020 [" in post_hoc[0] and "L4: +0.040 [" in post_hoc[1]  # 1.62 − 1.60 and 1.62 − 1.58


def test_a_clean_depth_against_the_claim_does_not_override_an_unbracketed_one(tmp_path):
    """The spec: a claim is inconclusive by the bracketing rule when any cell it compares is unbracketed, even when
    the other depth alone would refute it (Peri-LN worse at L8, Pre-LN's L4 search left open)."""
    lines = verdict.verdicts(write_sweep(tmp_path, LOSS | {"peri": 1.70}, GROWTH, at_edge={("pre", "L4")}))
    assert lines[0].startswith("- **Peri-LN beats Pre-LN: inconclusive by the bracketing rule.** (unbracketed: "
                               "pre@L4 (lr))")  # fmt: skip


def test_spikes_are_judged_depth_by_depth(tmp_path):
    """A depth where neither placement spiked tells nothing: Pre-LN spiking more at L8 alone is inconclusive, not
    "not reproduced"; Peri-LN spiking more at one depth refutes the claim."""
    lines = verdict.verdicts(write_sweep(tmp_path, LOSS, GROWTH, {("pre", "L8"): 1}))
    assert lines[2].startswith("- **Pre-LN spikes more: inconclusive.**")
    lines = verdict.verdicts(write_sweep(tmp_path, LOSS, GROWTH, {("peri", "L8"): 1}))
    assert lines[2].startswith("- **Pre-LN spikes more: not reproduced.**")
