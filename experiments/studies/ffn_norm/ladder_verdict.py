"""The FFN ladder's verdict, derived from its ledger by the rule its spec states before any run
(`ffn_norm_ladder.yaml`): the gated FFNs' lead over the plain ones at each size, and its trend with size. A size
whose lead touches a cell whose learning-rate search left an end open is inconclusive by the bracketing
rule (`analysis.decisions`), and so is the trend that rests on every size.

    python -m experiments.studies.ffn_norm.ladder_verdict experiments/studies/ffn_norm/results/ffn_norm_ladder
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from experiments.analysis import decisions as rules
from experiments.analysis.decisions import interval
from experiments.analysis.stats import paired_difference
from experiments.studies import table_script
from experiments.studies.ladder_trend import ladder_cells, trend

METRIC = "test/loss"
GATED, PLAIN = ("swiglu", "geglu"), ("relu", "gelu")


def _mean_by_seed(runs: list[dict[int, float]]) -> dict[int, float]:
    seeds = set.intersection(*(set(r) for r in runs))
    return {s: float(np.mean([r[s] for r in runs])) for s in seeds}


def verdicts(sweep_dir: Path) -> list[str]:
    """The lead at each size (a Markdown table) and the trend's label by the rule."""
    ladder = ladder_cells(sweep_dir, METRIC)
    if ladder.missing:
        return [f"- the final runs of {ladder.missing} (activation, size) cell(s) have not ended: no verdict yet"]
    acts = (*PLAIN, *GATED)
    rows = ["| size | non-embedding parameters | gated − plain [95% CI], p | present |", "|---|---:|---|---|"]
    leads, present, guards = {}, [], []
    for size in ladder.sizes:
        result = {a: ladder.at[(f"activation={a}", size)] for a in acts}
        gated = _mean_by_seed([result[a].values(METRIC) for a in GATED])
        plain = _mean_by_seed([result[a].values(METRIC) for a in PLAIN])
        d = paired_difference(gated, plain)
        n = result["relu"].stat("params_non_embedding")
        leads[n] = [gated[s] - plain[s] for s in sorted(set(gated) & set(plain))]
        edges = ladder.edges(*((f"activation={a}", size) for a in acts))
        guards.append(rules.bracketing(edges, edges))
        shown = rules.decide(rules.direction(d, "below"), guards[-1])
        present.append(shown.label == rules.REPRODUCED)
        label = "yes" if present[-1] else f"no{rules.why(shown)}" if shown.guard else "no"
        rows.append(f"| {size} | {n:,.0f} | {interval(d)} | {label} |")
    t = trend(leads)
    label = rules.decide(_trend_label(t.low, t.high, all(present)), *guards)
    by_t = rules.decide(_trend_label(t.t_low, t.t_high, all(present)), *guards)
    check = ("no interval while a size has one seed" if math.isnan(t.t_low) else "the same label"
             if by_t.label == label.label else f"by which it would read {by_t.label}")  # fmt: skip
    return [
        f"- **The gated FFNs' lead with size: {label}.**{rules.why(label)} Slope of the lead (mean(SwiGLU, GeGLU) − "
        f"mean(ReLU, GELU) on {METRIC}) against ln(non-embedding parameters): {t.slope:+.4f} per e-fold "
        f"[{t.low:+.4f}, {t.high:+.4f}] (bootstrap over seeds; Welch t, a check beside the rule: "
        f"[{t.t_low:+.4f}, {t.t_high:+.4f}], {check}); the lead is present (CI below 0, bracketed) at "
        f"{sum(present)} of {len(ladder.sizes)} sizes.",
        "",
        *rows,
    ]


def _trend_label(low: float, high: float, present_everywhere: bool) -> rules.Verdict:
    """The spec's trend rule on a slope interval: the lead is negative, so a falling slope is a lead that grows;
    "holds" when the interval holds 0 and the lead is present at every size."""
    label = rules.ladder_trend(low, high).relabel({"falls": "grows", "rises": "shrinks"})
    return rules.Verdict("holds") if label.label == rules.INCONCLUSIVE and present_everywhere else label


def main(argv: list[str] | None = None) -> int:
    return table_script.run_lines(argv, __doc__, verdicts, "ladder_verdict.md")


if __name__ == "__main__":
    raise SystemExit(main())
