"""The decision rules (`experiments.analysis.decisions`) on small synthetic ledgers read the way a study's
verdict reads its committed folder (`sweep_results.load`): each rule's three outcomes, and the guards that make a
comparison inconclusive by rule (an unbracketed cell, an unmet precondition, a floor)."""

from __future__ import annotations

import json
import math

import pytest

from experiments.analysis import decisions as rules
from experiments.analysis.stats import paired_difference
from experiments.analysis.sweep_results import load
from experiments.records.ledger import Ledger

GRID = [1e-3, 3e-3, 1e-2]
NOISE = (0.0, 0.01, -0.01)  # per seed; each cell shifts it by its index so the pairing does not cancel it all


def write(out, finals: dict[str, list[float]], chosen: dict[str, float], search_on=None):
    """A tuned sweep folder: each cell's search over `GRID` (a valley at its chosen lr, seed 10) and its final
    runs' test/loss and val/loss by seed."""
    out.mkdir(parents=True, exist_ok=True)
    cells = [{"name": n, "overrides": {"split": n.split("-")[0], "scheme": n.split("-")[-1]}} for n in finals]
    tune = {"grid": {"model.optim.lr": GRID}, "extend": 0, "metric": "val/loss", "seeds": [10]}
    info = {"cells": cells, "tune": tune | ({"search_on": search_on} if search_on else {})}
    (out / "sweep.json").write_text(json.dumps(info))
    ledger = Ledger(out / "results.csv", ("phase", "model.optim.lr"))
    for cell, values in finals.items():
        if cell in chosen:
            for lr in GRID:
                ledger.put({"cell": f"{cell}~lr={lr}", "seed": "10", "status": "done", "phase": "search",
                            "model.optim.lr": repr(lr), "val/loss": repr(2 + abs(lr - chosen[cell]))})  # fmt: skip
        lr = chosen.get(cell, next(iter(chosen.values())))
        for seed, value in enumerate(values):
            ledger.put({"cell": cell, "seed": str(seed), "status": "done", "phase": "final",
                        "model.optim.lr": repr(lr), "test/loss": repr(value), "val/loss": repr(value)})  # fmt: skip
    return out


def between(sweep, a: str, b: str, margin: float | None = None):
    return paired_difference(sweep.cells[a].values("test/loss"), sweep.cells[b].values("test/loss"), margin)


@pytest.fixture
def sweep(tmp_path):
    finals = {
        "base": [2.00, 2.01, 1.99],
        "better": [1.80, 1.82, 1.79],  # about −0.2, tight
        "level": [2.002, 2.011, 1.993],  # within ±0.02, tight
        "noisy": [1.90, 2.15, 1.95],  # holds 0 and −0.2
        "edge": [1.70, 1.71, 1.69],  # clearly better, but its lr is the grid's top
    }
    chosen = {"base": 3e-3, "better": 3e-3, "level": 3e-3, "noisy": 3e-3, "edge": 1e-2}
    return load(write(tmp_path, finals, chosen))


def test_direction_reads_the_ci_against_zero(sweep):
    assert rules.direction(between(sweep, "better", "base"), "below").label == rules.REPRODUCED
    assert rules.direction(between(sweep, "better", "base"), "above").label == rules.NOT_REPRODUCED
    assert rules.direction(between(sweep, "noisy", "base"), "below").label == rules.INCONCLUSIVE


def test_effect_against_the_papers_effect(sweep):
    better, noisy, level = (between(sweep, c, "base") for c in ("better", "noisy", "level"))
    assert rules.effect(better, paper=-0.2).label == rules.REPRODUCED
    assert rules.effect(noisy, paper=-0.2).label == rules.INCONCLUSIVE  # its CI holds both −0.2 and 0
    # a tight CI around 0 excludes the paper's −0.2: not reproduced; a CI on the other side too
    assert rules.effect(level, paper=-0.2).label == rules.NOT_REPRODUCED
    assert rules.effect(between(sweep, "base", "better"), paper=-0.2).label == rules.NOT_REPRODUCED


def test_equivalence_is_tost_first_then_the_worse_side(sweep):
    assert rules.equivalence(between(sweep, "level", "base", 0.02)).label == rules.REPRODUCED
    assert rules.equivalence(between(sweep, "base", "better", 0.02)).label == rules.NOT_REPRODUCED  # worse
    assert rules.equivalence(between(sweep, "better", "base", 0.02)).label == rules.INCONCLUSIVE  # better, no match
    assert rules.graded(between(sweep, "better", "base", 0.02)) == "better"
    assert rules.graded(between(sweep, "level", "base", 0.02)) == "matches"
    assert rules.graded(between(sweep, "noisy", "base", 0.02)) == "inconclusive"


def test_within_margin_judges_both_sides_alike(sweep):
    """A match either way: equivalent is reproduced; a CI wholly beyond the margin, better or worse, is not."""
    assert rules.within_margin(between(sweep, "level", "base", 0.02)).label == rules.REPRODUCED
    assert rules.within_margin(between(sweep, "better", "base", 0.02)).label == rules.NOT_REPRODUCED  # −0.2
    assert rules.within_margin(between(sweep, "base", "better", 0.02)).label == rules.NOT_REPRODUCED  # +0.2
    assert rules.within_margin(between(sweep, "noisy", "base", 0.02)).label == rules.INCONCLUSIVE


def test_direction_not_level_counts_a_level_pair_against_the_effect(sweep):
    assert rules.direction_not_level(between(sweep, "better", "base", 0.02), "below").label == rules.REPRODUCED
    level = rules.direction_not_level(between(sweep, "level", "base", 0.02), "below")
    assert level.label == rules.NOT_REPRODUCED and level.reason.startswith("equivalent to 0 within ±0.02")
    assert rules.direction_not_level(between(sweep, "base", "better", 0.02), "below").label == rules.NOT_REPRODUCED
    assert rules.direction_not_level(between(sweep, "noisy", "base", 0.02), "below").label == rules.INCONCLUSIVE


def test_noninferiority_reads_the_ci_against_the_margin(sweep):
    """ "Costs at most 0.02": a CI below +0.02 is reproduced, one wholly above it not, one holding it inconclusive."""
    assert rules.noninferior(between(sweep, "level", "base"), 0.02).label == rules.REPRODUCED
    assert rules.noninferior(between(sweep, "base", "better"), 0.02).label == rules.NOT_REPRODUCED
    assert rules.noninferior(between(sweep, "noisy", "base"), 0.02).label == rules.INCONCLUSIVE
    # higher is better (accuracy): a cost is a CI below −margin
    assert rules.noninferior(between(sweep, "better", "base"), 0.02, worse="below").label == rules.NOT_REPRODUCED


def test_differs_reads_an_effect_of_either_sign(sweep):
    """α0-sensitivity: a CI excluding 0 on either side is reproduced, a pair equivalent to 0 not, else neither."""
    assert rules.differs(between(sweep, "better", "base", 0.02)).label == rules.REPRODUCED
    assert rules.differs(between(sweep, "base", "better", 0.02)).label == rules.REPRODUCED
    level = rules.differs(between(sweep, "level", "base", 0.02))
    assert level.label == rules.NOT_REPRODUCED and level.reason.startswith("equivalent to 0 within ±0.02")
    assert rules.differs(between(sweep, "noisy", "base", 0.02)).label == rules.INCONCLUSIVE


def test_holds_states_a_criterion_that_is_no_test():
    assert rules.holds(True, "every median below 5%") == rules.Verdict(rules.REPRODUCED, "every median below 5%")
    assert rules.holds(False, "every median below 5%") == rules.Verdict(
        rules.NOT_REPRODUCED, "not every median below 5%"
    )


def test_a_comparison_touching_an_unbracketed_cell_is_inconclusive_by_rule(sweep):
    assert sweep.unbracketed() == {"edge": ["model.optim.lr"]}
    c = between(sweep, "edge", "base")
    assert rules.direction(c, "below").label == rules.REPRODUCED  # what the numbers alone would say
    verdict = rules.decide(rules.direction(c, "below"), rules.bracketing(sweep.unbracketed(), ["edge", "base"]))
    assert (verdict.label, verdict.guard, str(verdict)) == (rules.INCONCLUSIVE, "bracketing",
                                                            "inconclusive by the bracketing rule")  # fmt: skip
    assert verdict.reason == "unbracketed: edge (lr)"
    clean = rules.decide(rules.direction(between(sweep, "better", "base"), "below"),
                         rules.bracketing(sweep.unbracketed(), ["better", "base"]))  # fmt: skip
    assert clean.label == rules.REPRODUCED and clean.guard is None


def test_a_cell_that_ran_at_another_cells_choice_inherits_its_bracketing(tmp_path):
    """`tune.search_on`: the length split's cell never searched; it ran at the simple split's lr, at the edge."""
    finals = {"simple-a": [1.0, 1.1, 1.2], "length-a": [0.1, 0.2, 0.1]}
    sweep = load(write(tmp_path, finals, {"simple-a": 1e-2}, search_on={"split": "simple"}))
    assert sweep.unbracketed() == {"simple-a": ["model.optim.lr"], "length-a": ["model.optim.lr"]}
    assert sweep.chosen("length-a") == (1e-2,)


def test_an_unmet_precondition_is_inconclusive_by_rule(sweep):
    c = between(sweep, "better", "base")
    verdict = rules.decide(rules.direction(c, "below"), rules.precondition(False, "accuracy ≥ 95% in distribution"))
    assert str(verdict) == "inconclusive by the precondition rule"
    assert verdict.reason == "precondition not met: accuracy ≥ 95% in distribution"
    assert rules.precondition(True, "anything") is None


def test_a_cell_at_its_starting_point_is_a_floor(tmp_path):
    """Two fine-tunes that never left the pre-trained model's loss (2.00) compare nothing: level or not, the
    comparison is inconclusive by the floor rule; a cell that moved beyond its CI is not a floor."""
    finals = {"full": [1.60, 1.62, 1.61], "lora_r1": [2.01, 2.00, 2.02], "lora_r16": [2.005, 2.01, 2.015]}
    sweep = load(write(tmp_path, finals, {c: 3e-3 for c in finals}))
    floors = {c: rules.floor(sweep.cells[c].values("test/loss"), 2.00, higher=False, cell=c) for c in finals}
    assert floors["full"] is None and floors["lora_r1"] and floors["lora_r16"]
    level = between(sweep, "lora_r1", "lora_r16", 0.02)
    assert rules.equivalence(level).label == rules.REPRODUCED  # "r1 matches r16" by the numbers alone
    verdict = rules.decide(rules.equivalence(level), floors["lora_r1"], floors["lora_r16"])
    assert str(verdict) == "inconclusive by the floor rule"
    assert verdict.reason == "at its starting point: lora_r1 (2.010 against 2.000), lora_r16 (2.010 against 2.000)"
    # chance accuracy for a metric where higher is better: 0.26 ± noise over a start of 0.25 has not moved
    assert rules.floor([0.24, 0.27, 0.26], 0.25, higher=True, cell="vit") is not None
    assert rules.floor([0.60, 0.62, 0.61], 0.25, higher=True, cell="vit") is None


def test_combine_keeps_a_clean_negative_beside_a_guarded_comparison():
    guarded = rules.decide(rules.Verdict(rules.REPRODUCED), rules.Guard("bracketing", ("a (lr)",)))
    clean_no, clean_yes = rules.Verdict(rules.NOT_REPRODUCED), rules.Verdict(rules.REPRODUCED)
    assert rules.combine([guarded, clean_no]).label == rules.NOT_REPRODUCED
    both = rules.combine([guarded, clean_yes, rules.decide(clean_yes, rules.Guard("bracketing", ("b (lr)",)))])
    assert str(both) == "inconclusive by the bracketing rule" and both.reason == "unbracketed: a (lr), b (lr)"
    assert rules.combine([clean_yes, rules.Verdict(rules.INCONCLUSIVE)], positive="any").label == rules.REPRODUCED
    assert rules.combine([clean_no, rules.Verdict(rules.INCONCLUSIVE)], negative="all").label == rules.INCONCLUSIVE


def test_sensitivity_needs_its_difference_beyond_the_noise(tmp_path):
    """Lower by 10% and beyond the noise: reproduced; a hair above the baseline within the noise: inconclusive,
    not "not reproduced"; clearly above: not reproduced; no noise estimate: inconclusive."""
    assert rules.sensitivity(0.17, 0.55, allowance=0.03, lower_by=0.9).label == rules.REPRODUCED
    assert rules.sensitivity(0.537, 0.533, allowance=0.06, lower_by=0.9).label == rules.INCONCLUSIVE
    assert rules.sensitivity(0.537, 0.533, allowance=0.02, lower_by=0.9).label == rules.NOT_REPRODUCED
    assert rules.sensitivity(0.50, 0.533, allowance=0.02, lower_by=0.9).label == rules.INCONCLUSIVE
    assert rules.sensitivity(0.17, 0.55, allowance=math.nan, lower_by=0.9).label == rules.INCONCLUSIVE
    # the noise from seeds: one value per point estimates nothing; two seeds at a point do
    finals = {"a": [2.0, 2.1, 1.9], "b": [3.0, 3.0, 3.0]}
    sweep = load(write(tmp_path, finals, {"a": 3e-3, "b": 3e-3}))
    search = [values for s in sweep.searches.values() for values in s.points.values()]
    assert math.isnan(rules.seed_spread(search))
    spread = rules.seed_spread(list(c.values("val/loss").values()) for c in sweep.cells.values())
    assert spread == pytest.approx(math.sqrt((0.02 + 0) / 4))  # pooled: a's variance 0.01 × 2 dof, b's 0
    allowance = rules.sensitivity_allowance(spread, tune_seeds=1, grid_points=len(GRID))
    assert allowance == pytest.approx(2 * spread * math.sqrt(2 * (1 + 1 / 3)))


def test_ladder_trend_reads_the_slopes_interval():
    assert rules.ladder_trend(-0.06, -0.04).label == "falls"
    assert rules.ladder_trend(0.01, 0.02).label == "rises"
    assert rules.ladder_trend(-0.01, 0.02).label == rules.INCONCLUSIVE
    assert rules.ladder_trend(-0.06, -0.04).relabel({"falls": "grows"}).label == "grows"


def test_interval_spells_a_difference_as_the_verdict_files_do(sweep):
    c = between(sweep, "better", "base", 0.02)
    text = rules.interval(c, tost=True, n=True)
    assert text.startswith(f"{c.diff:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}], p = ")
    assert ", TOST p = " in text and text.endswith("(n = 3)")
