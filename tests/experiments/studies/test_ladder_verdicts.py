"""The two ladder studies' verdicts follow their specs' rules, on synthetic ladder ledgers (no training)."""

from __future__ import annotations

import json

import pytest

from experiments.records.ledger import Ledger
from experiments.studies import ladder_trend
from experiments.studies.extrapolation import ladder_verdict as extrapolation
from experiments.studies.ffn_norm import ladder_verdict as ffn
from experiments.studies.ladder_trend import trend

SIZES = {"d64": 1e5, "d96": 3.3e5, "d128": 7.9e5, "d160": 1.5e6}
NOISE = (-0.004, 0.001, 0.003)  # per seed, shared by every cell: the pairing removes it


GRID = [1e-3, 2e-3, 4e-3]


def write_ladder(out, values, at_edge=()):
    """values: (cell, size) -> {metric: value}; three seeds each, the same per-seed noise everywhere; each
    (cell, size) searched `GRID` and chose its middle, or its top for those in `at_edge` (unbracketed)."""
    out.mkdir(parents=True, exist_ok=True)
    names = {f"{cell},size={size}": [cell, size] for cell, size in values}
    info = {"cells": [{"name": n, "overrides": {}} for n in names], "axes": [],
            "ladder": {"sizes": [{"name": s, "overrides": {}} for s in SIZES], "cells": names},
            "tune": {"grid": {"model.optim.lr": GRID}, "extend": 0, "metric": "val/loss", "seeds": [10]}}  # fmt: skip
    (out / "sweep.json").write_text(json.dumps(info))
    ledger = Ledger(out / "results.csv", ("phase", "model.optim.lr"))
    for name, (cell, size) in names.items():
        best = GRID[-1] if (cell, size) in at_edge else GRID[1]
        for lr in GRID:
            ledger.put({"cell": f"{name}~lr={lr}", "seed": "10", "status": "done", "phase": "search",
                        "model.optim.lr": repr(lr), "val/loss": repr(2 + abs(lr - best))})  # fmt: skip
        for seed, noise in enumerate(NOISE):
            metrics = {m: repr(v + noise * (1 + 0.3 * seed * ("alibi" in cell or "glu" in cell)))
                       for m, v in values[(cell, size)].items()}  # fmt: skip
            ledger.put({"cell": name, "seed": str(seed), "status": "done", "phase": "final",
                        "model.optim.lr": repr(best), "params_non_embedding": repr(SIZES[size])} | metrics)  # fmt: skip
    return out


def ffn_values(lead):
    """test/loss of the four activations per size; the gated ones `lead(N)` below the plain ones."""
    out = {}
    for size, n in SIZES.items():
        plain = 2.0 - 0.1 * (n / 1e5) ** 0.3
        for act in ("relu", "gelu"):
            out[(f"activation={act}", size)] = {"test/loss": plain + (0.01 if act == "relu" else 0.0)}
        for act in ("swiglu", "geglu"):
            out[(f"activation={act}", size)] = {"test/loss": plain + lead(n)}
    return out


@pytest.mark.parametrize(
    "lead, label",
    [
        (lambda n: -0.05, "holds"),  # the same lead at every size
        (lambda n: -0.02 - 0.02 * (n / 1e5) ** 0.5, "grows"),  # widening with size
        (lambda n: -0.08 + 0.015 * (n / 1e5) ** 0.5, "shrinks"),  # narrowing with size
        (lambda n: 0.005, "inconclusive"),  # level with the plain mean (ReLU is 0.01 above GELU): no lead
    ],
)
def test_the_ffn_trend_is_labelled_by_the_stated_rule(tmp_path, lead, label, monkeypatch):
    monkeypatch.setattr(ladder_trend, "BOOTSTRAP", 500)
    lines = ffn.verdicts(write_ladder(tmp_path, ffn_values(lead)))
    assert lines[0].startswith(f"- **The gated FFNs' lead with size: {label}.**"), lines[0]
    assert sum(line.startswith("| d") for line in lines) == 4


def extrapolation_values(gap_4x, alibi_rise=-0.01):
    out = {}
    for size, n in SIZES.items():
        base = 1.9 - 0.1 * (n / 1e5) ** 0.3
        rope = {"test/loss": base, "test/loss@64": base, "test/loss@256": base + 0.3, "test/loss@512": base + 0.6}
        alibi_1x = base + 0.05
        alibi = {"test/loss": alibi_1x, "test/loss@64": alibi_1x, "test/loss@256": base + 0.3 + gap_4x(size),
                 "test/loss@512": alibi_1x + alibi_rise}  # fmt: skip
        out[("pos_encoding=rope", size)], out[("pos_encoding=alibi", size)] = rope, alibi
    return out


def test_the_extrapolation_checks_follow_the_stated_rule(tmp_path, monkeypatch):
    monkeypatch.setattr(ladder_trend, "BOOTSTRAP", 500)
    lines = extrapolation.verdicts(write_ladder(tmp_path, extrapolation_values(lambda size: -0.25)))
    assert lines[0].startswith("- **ALiBi extrapolates better than RoPE (4×, test/loss@256): holds at every size.**")
    assert lines[1].startswith("- **ALiBi stays flat to 8×: holds at every size**")
    reverses = extrapolation_values(lambda size: 0.1 if size == "d160" else -0.25, alibi_rise=0.05)
    lines = extrapolation.verdicts(write_ladder(tmp_path, reverses))
    assert ": reverses at d160.**" in lines[0] and "does not hold" in lines[1]


def test_alibis_rise_with_an_interval_that_holds_the_flat_margin_is_inconclusive(tmp_path, monkeypatch):
    """The 8× − 1× rise's CI straddles +0.01 (seed noise around a rise of +0.01): neither flat nor rising."""
    monkeypatch.setattr(ladder_trend, "BOOTSTRAP", 500)
    out = write_ladder(tmp_path, extrapolation_values(lambda size: -0.25, alibi_rise=0.01))
    ledger = Ledger(out / "results.csv")
    for (cell, seed), row in list(ledger.rows.items()):
        if cell.startswith("pos_encoding=alibi,size=") and row["phase"] == "final":
            ledger.put(row | {"test/loss@512": repr(float(row["test/loss@512"]) + 0.01 * (seed - 1))})
    lines = extrapolation.verdicts(out)
    assert lines[1].startswith("- **ALiBi stays flat to 8×: inconclusive at d64, d96, d128, d160**"), lines[1]


def test_an_unbracketed_cell_makes_its_size_and_the_trend_inconclusive_by_rule(tmp_path, monkeypatch):
    """ReLU at d64 and ALiBi at d96 chose their grid's top: the sizes they enter, and every trend (which rests on
    every size), are inconclusive by the bracketing rule; the bracketed sizes keep their reading."""
    monkeypatch.setattr(ladder_trend, "BOOTSTRAP", 500)
    lines = ffn.verdicts(write_ladder(tmp_path / "ffn", ffn_values(lambda n: -0.05), {("activation=relu", "d64")}))
    assert lines[0].startswith("- **The gated FFNs' lead with size: inconclusive by the bracketing rule.** "
                               "(unbracketed: activation=relu,size=d64 (lr))")  # fmt: skip
    assert "present (CI below 0, bracketed) at 3 of 4 sizes" in lines[0]
    assert "| d64 | 100,000 | " in lines[4] and lines[4].endswith("| no (unbracketed: activation=relu,size=d64 (lr)) |")
    edge = {("pos_encoding=alibi", "d96")}
    lines = extrapolation.verdicts(write_ladder(tmp_path / "ext", extrapolation_values(lambda size: -0.25), edge))
    assert ": inconclusive by the bracketing rule at d96.**" in lines[0]
    assert lines[1].startswith("- **ALiBi stays flat to 8×: inconclusive by the bracketing rule at d96**")
    assert lines[2].endswith("; inconclusive by the bracketing rule (it rests on every size, †).")
    assert lines[-1] == "† inconclusive by the bracketing rule (unbracketed: pos_encoding=alibi,size=d96 (lr))."


def test_no_verdict_before_every_size_has_ended(tmp_path):
    values = ffn_values(lambda n: -0.05)
    del values[("activation=geglu", "d160")]
    path = write_ladder(tmp_path, values)
    info = json.loads((path / "sweep.json").read_text())
    info["ladder"]["cells"]["activation=geglu,size=d160"] = ["activation=geglu", "d160"]  # planned, not run
    (path / "sweep.json").write_text(json.dumps(info))
    assert "have not ended" in ffn.verdicts(path)[0]


def test_the_trend_recovers_a_planted_slope():
    planted = {n: [0.1 * float(__import__("math").log(n)) + e for e in (-0.01, 0.0, 0.01)] for n in SIZES.values()}
    t = trend(planted)
    assert t.slope == pytest.approx(0.1, abs=1e-9) and t.low < 0.1 < t.high


def test_the_welch_interval_is_the_two_sample_one_at_two_sizes():
    """At two sizes the slope is (mean₂ − mean₁)/(x₂ − x₁): its t interval is Welch's for the difference of the
    two means, scaled by 1/(x₂ − x₁)."""
    from scipy import stats

    a, b = [0.10, 0.13, 0.08], [0.02, -0.01, 0.05, 0.03]
    t = trend({1e5: a, 1e6: b})
    ci = stats.ttest_ind(b, a, equal_var=False).confidence_interval(0.95)
    dx = __import__("math").log(10.0)
    assert (t.t_low, t.t_high) == pytest.approx((ci.low / dx, ci.high / dx), rel=1e-9)


def test_the_welch_interval_is_wider_than_the_bootstrap_with_three_seeds():
    """The reason it is shown beside the pre-registered bootstrap: with 3 seeds a size the bootstrap runs narrow."""
    planted = {n: [0.1 * float(__import__("math").log(n)) + e for e in (-0.01, 0.0, 0.012)] for n in SIZES.values()}
    t = trend(planted)
    assert t.t_low < t.low < t.slope < t.high < t.t_high
    one_seed = trend({1e5: [0.1], 1e6: [0.2, 0.3]})
    assert one_seed.t_low != one_seed.t_low  # NaN: no variance from one seed


def test_the_ffn_verdict_shows_the_welch_check_and_says_when_its_label_differs(tmp_path, monkeypatch):
    monkeypatch.setattr(ladder_trend, "BOOTSTRAP", 500)
    lines = ffn.verdicts(write_ladder(tmp_path / "a", ffn_values(lambda n: -0.05)))
    assert "(bootstrap over seeds; Welch t, a check beside the rule: [" in lines[0] and "the same label" in lines[0]
    monkeypatch.setattr(ladder_trend, "welch", lambda x, values, point: (point - 1.0, point - 0.5))
    lines = ffn.verdicts(write_ladder(tmp_path / "b", ffn_values(lambda n: -0.05)))
    assert lines[0].startswith("- **The gated FFNs' lead with size: holds.**") and "would read grows" in lines[0]
