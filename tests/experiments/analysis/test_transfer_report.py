"""A ladder tuned once (`experiments.analysis.transfer_report`) on constructed ledgers, no training: "transfer
verified" when ×1 is the best of its bracket within the seed noise, "transfer failed" otherwise, and the verdict
library (`sweep_results.unbracketed` -> `decisions.bracketing`) treating a failed transfer as unbracketed."""

from __future__ import annotations

import json
import math

import pytest

from experiments.analysis import decisions, ladder_fit
from experiments.analysis.sweep_report import build_report
from experiments.analysis.sweep_results import load
from experiments.analysis.transfer_report import FAILED, PENDING, VERIFIED, transfer_checks, transfer_section
from experiments.records.ledger import Ledger
from experiments.sweep.spec import load_spec
from tests.experiments.sweep.test_ladder_spec import ladder_spec

LR = "model.optim.lr"
LADDER = [{"name": f"d{d}", "model.arch.d_model": d, "model.arch.n_heads": 2} for d in (32, 64, 128)]
GRID = [0.001, 0.002, 0.004]
SEEDS = (0, 1, 2)


def write(out, top: dict[str, dict[float, list[float]]], chosen: dict[str, float], tune_seeds=(0, 1)):
    """A ladder sweep folder tuned once at d32 (SP rule: lr ∝ 1/d_model; extend 0, so a choice at the grid's top is
    unbracketed): each scheme's search at d32 (a valley at `chosen`), its final runs at every size, and at d128
    `top[scheme]`: verify factor -> val/loss per tune seed (×1: the final runs' val/loss at those seeds)."""
    out.mkdir(parents=True, exist_ok=True)
    tune = {"grid": {LR: GRID}, "extend": 0, "seeds": list(tune_seeds),
            "transfer": {"rule": {LR: {"with": "model.arch.d_model", "power": -1}}}}  # fmt: skip
    grid = {"model.arch.pos_encoding": list(chosen)}
    spec = load_spec(ladder_spec(out / "s.yaml", grid, ladder=LADDER, seeds=list(SEEDS), tune=tune))
    info = spec.snapshot()
    (out / "sweep.json").write_text(json.dumps(info))
    ledger = Ledger(out / "results.csv", spec.ledger_axes)
    for scheme, best in chosen.items():
        for lr in GRID:
            for seed in tune_seeds:
                ledger.put({"cell": f"pos_encoding={scheme},size=d32~lr={lr}", "seed": str(seed), "status": "done",
                            "phase": "search", LR: repr(lr), "val/loss": repr(2 + abs(lr - best))})  # fmt: skip
        for d in (32, 64, 128):
            lr, cell = best * 32 / d, f"pos_encoding={scheme},size=d{d}"
            at_top = top.get(scheme, {})
            for seed in SEEDS:
                tuned = seed in tune_seeds and 1.0 in at_top
                value = at_top[1.0][tune_seeds.index(seed)] if tuned else 2.5 - d / 1000 + seed / 100
                status = "done" if math.isfinite(value) else "diverged"
                ledger.put({"cell": cell, "seed": str(seed), "status": status, "phase": "final", LR: repr(lr),
                            "unbracketed": LR if best == GRID[-1] else "", "val/loss": repr(value),
                            "test/loss": repr(value + 0.01), "steps": "12", "params_non_embedding": repr(d * d * 12),
                            "flops_per_token": repr(d * d * 24)})  # fmt: skip
            for factor, values in at_top.items():
                for seed, value in zip(tune_seeds, values):
                    if factor != 1.0 or seed not in SEEDS:
                        status = "done" if math.isfinite(value) else "diverged"
                        ledger.put({"cell": f"{cell}~lr={lr * factor!r}", "seed": str(seed), "status": status,
                                    "phase": "verify", LR: repr(lr * factor), "val/loss": repr(value)})  # fmt: skip
    return out


CLEAR = {0.5: [2.10, 2.12], 1.0: [2.00, 2.02], 2.0: [2.05, 2.06]}  # ×1 best
MOVED = {0.5: [2.20, 2.21], 1.0: [2.10, 2.11], 2.0: [1.95, 1.96]}  # ×2 better by 0.15, far beyond the noise


@pytest.fixture
def sweep(tmp_path):
    """rope: searched to the grid's top (unbracketed at d32), verified at d128; alibi: bracketed, failed at d128."""
    return load(write(tmp_path / "out", {"rope": CLEAR, "alibi": MOVED}, {"rope": 0.004, "alibi": 0.002}))


def test_verified_and_failed_transfers(sweep):
    checks = transfer_checks(sweep.ledger, sweep.info)
    assert set(checks) == {"pos_encoding=rope,size=d128", "pos_encoding=alibi,size=d128"}
    rope, alibi = checks["pos_encoding=rope,size=d128"], checks["pos_encoding=alibi,size=d128"]
    assert rope.outcome == VERIFIED and alibi.outcome == FAILED and alibi.failed() == [LR]
    assert rope.transferred == pytest.approx((0.001,)) and rope.keys[0].factors == CLEAR  # ×1 read from the final runs
    (key,) = alibi.keys
    # the pooled seed sd is 0.01/√2 at every factor; two tune seeds: allowance 2·s·√(2/2)
    assert key.mean(2.0) == pytest.approx(1.955) and key.allowance == pytest.approx(2 * 0.01 / math.sqrt(2))


def test_a_failed_transfer_is_unbracketed_for_the_verdicts(sweep):
    assert sweep.unbracketed() == {
        "pos_encoding=rope,size=d32": [LR],  # its search ended at the grid's top (extend 0) ...
        "pos_encoding=rope,size=d64": [LR],  # ... and the size that only received it inherits that
        "pos_encoding=alibi,size=d128": [f"{LR}: transfer failed"],
    }  # rope at d128 is absent: its verify runs bracket the value there
    guard = decisions.bracketing(sweep.unbracketed(), ["pos_encoding=rope,size=d128", "pos_encoding=alibi,size=d128"])
    verdict = decisions.decide(decisions.Verdict(decisions.REPRODUCED), guard)  # whatever a rule said
    assert str(verdict) == "inconclusive by the bracketing rule"
    assert verdict.reason == "unbracketed: pos_encoding=alibi,size=d128 (lr: transfer failed)"
    assert decisions.bracketing(sweep.unbracketed(), ["pos_encoding=rope,size=d128"]) is None
    assert sweep.chosen("pos_encoding=alibi,size=d128") == pytest.approx((0.0005,))  # the value transferred to the size


@pytest.mark.parametrize(
    "values, outcome",
    [
        ({0.5: [2.10, 2.14], 1.0: [2.00, 2.04], 2.0: [1.99, 2.03]}, VERIFIED),  # ×2 better by 0.01 < 2·s = 0.057
        ({0.5: [2.10, 2.14], 1.0: [2.00, 2.04], 2.0: [1.90, 1.94]}, FAILED),  # better by 0.10: beyond the noise
        ({0.5: [2.10, 2.14], 1.0: [2.00, math.inf], 2.0: [2.05, 2.07]}, FAILED),  # ×1 diverged: the worst
        ({0.5: [2.10, 2.14], 1.0: [2.00, 2.04], 2.0: [2.05]}, PENDING),  # ×2 at seed 1 has not run
        ({0.5: [2.10, 2.14], 1.0: [2.00, 2.04]}, PENDING),
    ],
    ids=["within-noise", "beyond-noise", "x1-diverged", "a-seed-missing", "a-factor-missing"],
)
def test_the_noise_rule(tmp_path, values, outcome):
    sweep = load(write(tmp_path / "out", {"rope": values}, {"rope": 0.002}))
    assert sweep.transfers()["pos_encoding=rope,size=d128"].outcome == outcome
    top = sweep.unbracketed().get("pos_encoding=rope,size=d128")
    expected = {FAILED: [f"{LR}: transfer failed"], PENDING: [f"{LR}: transfer pending"], VERIFIED: None}
    assert top == expected[outcome]  # pending: no verdict may rest on it until its check ends


@pytest.mark.parametrize("x2, outcome", [(1.999, FAILED), (2.001, VERIFIED)])
def test_one_tune_seed_has_no_noise_estimate_so_x1_must_be_best(tmp_path, x2, outcome):
    values = {0.5: [2.1], 1.0: [2.0], 2.0: [x2]}
    sweep = load(write(tmp_path / "out", {"rope": values}, {"rope": 0.002}, tune_seeds=(0,)))
    (check,) = sweep.transfers().values()
    assert check.outcome == outcome and check.keys[0].allowance == 0.0


def test_x1_at_a_tune_seed_that_is_not_a_spec_seed_is_a_verify_run(tmp_path):
    values = {0.5: [2.10, 2.12], 1.0: [2.00, 2.01], 2.0: [2.05, 2.06]}
    sweep = load(write(tmp_path / "out", {"rope": values}, {"rope": 0.002}, tune_seeds=(2, 7)))
    (check,) = sweep.transfers().values()
    assert check.keys[0].factors[1.0] == [2.00, 2.01] and check.outcome == VERIFIED  # seed 2: final; 7: verify


def test_the_report_says_verified_or_failed_and_compares_only_final_runs(sweep, monkeypatch):
    text = transfer_section(sweep.ledger, sweep.info)
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| `pos")}
    assert rows["| `pos_encoding=rope,size=d128`"].endswith("| transfer verified |")
    assert rows["| `pos_encoding=alibi,size=d128`"].endswith("| **transfer failed** |")
    assert "| 0.0005 | 2.2050 | 2.1050 | 1.9550 |" in rows["| `pos_encoding=alibi,size=d128`"]  # ×½, ×1, ×2 means
    assert "scaled by `model.optim.lr` × (model.arch.d_model / its value at d32)^-1" in text
    monkeypatch.setattr(ladder_fit, "BOOTSTRAP", 20)
    build_report(sweep.dir)
    report = (sweep.dir / "report.md").read_text()
    assert "### Transfer" in report.split("## Ladder")[1] and "transfer failed" in report
    results = report.split("## Results")[1].split("## Tuning")[0]
    assert "~" not in results  # verify runs, like search runs, are not cells compared
