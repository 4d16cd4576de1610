"""Decision rules: a study's verdict is a declaration of which of these rules apply to which comparisons.

Each rule turns statistics (`stats.Comparison`, a ladder `Trend`, sensitivities) into a `Verdict`: a label
(*reproduced*, *not reproduced*, *inconclusive*, or a study's own words through `Verdict.relabel`) and its
reason. Three guards come before any rule: a comparison that touches a cell whose learning-rate search ended
with an end still open, or whose transferred learning rate failed its check at a ladder's largest size
(`bracketing`: a better value may lie beyond), an unmet precondition (`precondition`), or a cell that never left
its starting point (`floor`: the pre-trained model's loss, the unigram loss, chance) is **inconclusive by that
rule**, whatever its numbers say (`decide`). A claim read at several sizes or depths
combines its per-comparison verdicts with `combine`, so one clean "not reproduced" still counts beside a
guarded size.

    sweep = sweep_results.load(folder)  # its cells, and each cell's unbracketed tuned keys
    guard = decisions.bracketing(sweep.unbracketed(), ["layernorm,size=d64", "dyt,size=d64"])
    verdict = decisions.decide(decisions.equivalence(comparison), guard)  # str(): "inconclusive by the ... rule"
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from experiments.analysis.formatting import p_text
from experiments.analysis.stats import Comparison, summarize

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
Side = Literal["below", "above"]


PREFIX = {"bracketing": "unbracketed", "precondition": "precondition not met", "floor": "at its starting point"}


@dataclass(frozen=True)
class Guard:
    """Why a comparison cannot be read: `rule` names the guard (`bracketing`, `precondition`, `floor`), `items`
    what holds it (the unbracketed cells, the unmet condition, the cells at their starting point)."""

    rule: str
    items: tuple[str, ...]

    @property
    def reason(self) -> str:
        return f"{PREFIX.get(self.rule, self.rule)}: {', '.join(self.items)}"


@dataclass(frozen=True)
class Verdict:
    """A rule's outcome: `label`, the `reason` in words, and the guard that made it inconclusive (if one did)."""

    label: str
    reason: str = ""
    guard: str | None = None
    guards: tuple[Guard, ...] = ()

    def __str__(self) -> str:
        return f"{self.label} by the {self.guard} rule" if self.guard else self.label

    def relabel(self, labels: Mapping[str, str]) -> Verdict:
        """The study's own words for the library's labels (`{"reproduced": "matches"}`); others kept."""
        return replace(self, label=labels.get(self.label, self.label))


def decide(verdict: Verdict, *guards: Guard | None) -> Verdict:
    """`verdict`, unless a guard holds: then inconclusive by the first guard's rule, with every guard's reason."""
    held = [g for g in guards if g is not None]
    if not held:
        return verdict
    return Verdict(INCONCLUSIVE, reasons(held), held[0].rule, tuple(held))


def reasons(guards: Sequence[Guard]) -> str:
    """The guards' reasons, one per rule, each item once: `unbracketed: a (lr), b (lr)`."""
    merged: dict[str, dict[str, None]] = {}
    for guard in guards:
        merged.setdefault(guard.rule, {}).update(dict.fromkeys(guard.items))
    return "; ".join(Guard(rule, tuple(items)).reason for rule, items in merged.items())


def combine(
    verdicts: Sequence[Verdict], positive: Literal["any", "all"] = "all", negative: Literal["any", "all"] = "any"
) -> Verdict:
    """A claim over several comparisons: reproduced when every one (`positive` "all") or any one ("any") is;
    else not reproduced when any (`negative` "any") or every ("all") one is; else inconclusive, by a guard's
    rule when a guarded comparison kept it from either (the guards' reasons listed, each once)."""
    labels = [v.label for v in verdicts]
    quantifier = {"any": any, "all": all}
    if verdicts and quantifier[positive](label == REPRODUCED for label in labels):
        return Verdict(REPRODUCED)
    if verdicts and quantifier[negative](label == NOT_REPRODUCED for label in labels):
        return Verdict(NOT_REPRODUCED)
    guarded = [v for v in verdicts if v.guard]
    if not guarded:
        return Verdict(INCONCLUSIVE)
    guards = tuple(g for v in guarded for g in v.guards)
    return Verdict(INCONCLUSIVE, reasons(guards), guarded[0].guard, guards)


# --- guards --------------------------------------------------------------------------------------------


def bracketing(unbracketed: Mapping[str, Sequence[str]], cells: Iterable[str]) -> Guard | None:
    """The guard of a comparison touching `cells`: `unbracketed` maps a cell to the tuned keys its search left
    open (`tuning_report.CellSearch.unbracketed`: the best at an end of what it tried, or an end still no worse than
    its neighbour), or, at a ladder's largest size tuned once, `<key>: transfer failed` or `<key>: transfer
    pending` (`transfer_report`); absent or empty: bracketed."""
    found = {cell: list(unbracketed.get(cell) or ()) for cell in dict.fromkeys(cells)}
    edge = [f"{cell} ({', '.join(k.rpartition('.')[2] for k in keys)})" for cell, keys in found.items() if keys]
    return Guard("bracketing", tuple(edge)) if edge else None


def precondition(met: bool, what: str) -> Guard | None:
    """The guard of a study's precondition (`what`: the condition in words)."""
    return None if met else Guard("precondition", (what,))


def floor(values: Mapping[int, float] | Sequence[float], start: float, higher: bool, cell: str) -> Guard | None:
    """The guard of a cell that has not moved beyond noise from its starting value `start` (a fine-tune's
    pre-trained loss, the unigram loss, chance accuracy): its 95% CI over seeds does not lie wholly on the
    better side of `start`. A single run has no CI: it must beat `start` outright."""
    summary = summarize(list(values.values()) if isinstance(values, Mapping) else list(values))
    if summary.n == 0:
        return Guard("floor", (f"{cell} (no finished run)",))
    bound = summary.mean if summary.n < 2 else (summary.ci_low if higher else summary.ci_high)
    moved = bound > start if higher else bound < start
    return None if moved else Guard("floor", (f"{cell} ({summary.mean:.3f} against {start:.3f})",))


# --- rules ---------------------------------------------------------------------------------------------


def side(c: Comparison) -> Literal["below", "above", "contains"]:
    """Where the 95% CI of a difference lies against 0 (`contains` for a missing interval)."""
    return "below" if c.ci_high < 0 else "above" if c.ci_low > 0 else "contains"


def direction(c: Comparison, expected: Side) -> Verdict:
    """The paper's direction: reproduced when the CI lies on the `expected` side of 0, not reproduced on the
    other side, inconclusive when it holds 0."""
    where = side(c)
    if where == "contains":
        return Verdict(INCONCLUSIVE, "the 95% CI holds 0")
    return Verdict(REPRODUCED if where == expected else NOT_REPRODUCED, f"the 95% CI lies {where} 0")


def effect(c: Comparison, paper: float) -> Verdict:
    """The paper's effect with the CI: inconclusive when the CI holds both the paper's effect and 0,
    reproduced when it lies on the paper's side of 0, not reproduced otherwise (it excludes the paper's
    effect and holds 0, or lies on the other side)."""
    holds = lambda x: c.ci_low <= x <= c.ci_high  # noqa: E731
    if holds(paper) and holds(0.0) or not math.isfinite(c.ci_low):
        return Verdict(INCONCLUSIVE, f"the 95% CI holds both the paper's {paper:+.3f} and 0")
    if side(c) == ("below" if paper < 0 else "above"):
        return Verdict(REPRODUCED, "the 95% CI lies on the paper's side of 0")
    return Verdict(NOT_REPRODUCED, f"the 95% CI excludes the paper's {paper:+.3f}")


def equivalence(c: Comparison, worse: Side = "above") -> Verdict:
    """Matches: reproduced when equivalent within the comparison's margin (TOST, checked first: a
    difference inside the margin matches even when its CI excludes 0), not reproduced when the CI lies on the
    `worse` side of 0, inconclusive otherwise (a CI on the better side is not a match either)."""
    if c.equivalent:
        return Verdict(REPRODUCED, f"equivalent within ±{c.margin:g} (TOST p = {p_text(c.equivalence_p)})")
    if side(c) == worse:
        return Verdict(NOT_REPRODUCED, f"the 95% CI lies {worse} 0")
    return Verdict(INCONCLUSIVE, f"not equivalent within ±{c.margin:g}, not worse")


def within_margin(c: Comparison) -> Verdict:
    """Matches, judged on both sides alike: reproduced when equivalent within the comparison's margin (TOST), not
    reproduced when the 95% CI lies wholly beyond it on either side, inconclusive otherwise."""
    if c.equivalent:
        return Verdict(REPRODUCED, f"equivalent within ±{c.margin:g} (TOST p = {p_text(c.equivalence_p)})")
    if c.ci_low > c.margin or c.ci_high < -c.margin:
        return Verdict(NOT_REPRODUCED, f"the 95% CI lies beyond ±{c.margin:g}")
    return Verdict(INCONCLUSIVE, f"the 95% CI holds ±{c.margin:g} or 0")


def direction_not_level(c: Comparison, expected: Side) -> Verdict:
    """`direction`, where a difference equivalent to 0 within the comparison's margin (TOST) also refutes: the
    claim is of an effect, and a level pair shows there is none worth the margin."""
    if side(c) != expected and c.equivalent:
        return Verdict(NOT_REPRODUCED, f"equivalent to 0 within ±{c.margin:g} (TOST p = {p_text(c.equivalence_p)})")
    return direction(c, expected)


def differs(c: Comparison) -> Verdict:
    """An effect of either sign: reproduced when the 95% CI excludes 0, not reproduced when the difference is
    equivalent to 0 within the comparison's margin (TOST), inconclusive otherwise."""
    if side(c) != "contains":
        return Verdict(REPRODUCED, "the 95% CI excludes 0")
    if c.equivalent:
        return Verdict(NOT_REPRODUCED, f"equivalent to 0 within ±{c.margin:g} (TOST p = {p_text(c.equivalence_p)})")
    return Verdict(INCONCLUSIVE, "the 95% CI holds 0, not equivalent to it")


def holds(condition: bool, what: str) -> Verdict:
    """A pre-registered criterion that is no statistical test (a threshold on a median, a count, the grid value a
    search chose): reproduced when `what` holds, not reproduced when it does not."""
    return Verdict(REPRODUCED, what) if condition else Verdict(NOT_REPRODUCED, f"not {what}")


def noninferior(c: Comparison, margin: float, worse: Side = "above") -> Verdict:
    """A cost of at most `margin`: reproduced when the 95% CI stays short of the margin on the `worse` side, not
    reproduced when it lies wholly beyond it, inconclusive when it holds the margin."""
    bound = margin if worse == "above" else -margin
    if (c.ci_high < bound) if worse == "above" else (c.ci_low > bound):
        return Verdict(REPRODUCED, f"the 95% CI stays within {bound:+g}")
    if (c.ci_low > bound) if worse == "above" else (c.ci_high < bound):
        return Verdict(NOT_REPRODUCED, f"the 95% CI lies beyond {bound:+g}")
    return Verdict(INCONCLUSIVE, f"the 95% CI holds {bound:+g}")


def graded(c: Comparison, worse: Side = "above") -> str:
    """A method against a reference in one word: `matches` (TOST first), `worse`, `better` or `inconclusive`."""
    if c.equivalent:
        return "matches"
    where = side(c)
    return "inconclusive" if where == "contains" else "worse" if where == worse else "better"


def sensitivity(variant: float, baseline: float, allowance: float, lower_by: float) -> Verdict:
    """The claim "the variant lowers learning-rate sensitivity": reproduced when `variant` < `lower_by`·`baseline` and
    lower by more than the noise `allowance`; not reproduced when `variant` ≥ `baseline` and above the claimed
    `lower_by`·`baseline` by more than the allowance; inconclusive otherwise, and without a noise estimate."""
    if not math.isfinite(allowance):
        return Verdict(INCONCLUSIVE, "no noise estimate for the sensitivity")
    if variant < lower_by * baseline and baseline - variant > allowance:
        return Verdict(REPRODUCED, f"{variant:.3f} < {lower_by:g} × {baseline:.3f}, beyond ±{allowance:.3f}")
    if variant >= baseline and variant - allowance > lower_by * baseline:
        return Verdict(NOT_REPRODUCED, f"{variant:.3f} ≥ {baseline:.3f}, above {lower_by:g}× it by ±{allowance:.3f}")
    return Verdict(INCONCLUSIVE, f"{variant:.3f} against {baseline:.3f} within the noise ±{allowance:.3f}")


def sensitivity_allowance(search_spread: float, tune_seeds: int, grid_points: int) -> float:
    """The noise of the difference of two cells' sensitivities: two standard deviations, for independent seed
    noise of sd `search_spread` at each search point averaged over `tune_seeds` (a sensitivity is the mean over
    `grid_points` minus the best point, so each has sd ≈ spread·√(1 + 1/G); the difference √2 of that)."""
    return 2 * search_spread * math.sqrt(2 * (1 + 1 / grid_points) / max(tune_seeds, 1))


def seed_spread(point_values: Iterable[Sequence[float]]) -> float:
    """The pooled sample standard deviation over seeds of the points that have at least two finite values;
    nan without any (one search seed cannot estimate its own noise)."""
    groups = [np.asarray([v for v in values if math.isfinite(v)]) for values in point_values]
    groups = [g for g in groups if len(g) > 1]
    if not groups:
        return math.nan
    return float(math.sqrt(sum(((g - g.mean()) ** 2).sum() for g in groups) / sum(len(g) - 1 for g in groups)))


def ladder_trend(low: float, high: float) -> Verdict:
    """How a difference moves with size, by its slope's 95% interval against ln(parameters) (`ladder.trend`):
    labelled `falls` (interval below 0), `rises` (above) or inconclusive."""
    if high < 0:
        return Verdict("falls", "the slope's 95% CI lies below 0")
    if low > 0:
        return Verdict("rises", "the slope's 95% CI lies above 0")
    return Verdict(INCONCLUSIVE, "the slope's 95% CI holds 0")


# --- wording -------------------------------------------------------------------------------------------


def interval(c: Comparison, tost: bool = False, n: bool = False) -> str:
    """A difference as the verdict files spell it: `+0.171 [+0.120, +0.222], p = 0.004` (with `tost`: its
    TOST p; with `n`: the number of seed pairs)."""
    text = f"{c.diff:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}], p = {p_text(c.p_value)}"
    return text + (f", TOST p = {p_text(c.equivalence_p)}" if tost else "") + (f" (n = {c.n})" if n else "")


def why(verdict: Verdict) -> str:
    """A guarded verdict's reason in brackets, ` (unbracketed: ...)`; nothing for an unguarded one."""
    return f" ({verdict.reason})" if verdict.guard else ""
