"""The FFN ladder's verdict, derived from its ledger by the rule its spec states before any run
(`ffn_norm_ladder.yaml`): the gated FFNs' lead over the plain ones at each size, and its trend with size.

    python -m experiments.studies.ffn_norm.ladder_verdict experiments/studies/ffn_norm/results/ffn_norm_ladder
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from experiments.analysis.formatting import p_text
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
    sizes, at, missing = ladder_cells(sweep_dir, METRIC)
    if missing:
        return [f"- the final runs of {missing} (activation, size) cell(s) have not ended: no verdict yet"]
    acts = (*PLAIN, *GATED)
    rows = ["| size | non-embedding parameters | gated − plain [95% CI], p | present |", "|---|---:|---|---|"]
    leads, present = {}, []
    for size in sizes:
        result = {a: at[(f"activation={a}", size)] for a in acts}
        gated = _mean_by_seed([result[a].values(METRIC) for a in GATED])
        plain = _mean_by_seed([result[a].values(METRIC) for a in PLAIN])
        d = paired_difference(gated, plain)
        n = result["relu"].stat("params_non_embedding")
        leads[n] = [gated[s] - plain[s] for s in sorted(set(gated) & set(plain))]
        present.append(d.ci_high < 0)
        rows.append(f"| {size} | {n:,.0f} | {d.diff:+.3f} [{d.ci_low:+.3f}, {d.ci_high:+.3f}], p = {p_text(d.p_value)} "
                    f"| {'yes' if d.ci_high < 0 else 'no'} |")  # fmt: skip
    t = trend(leads)
    label = "grows" if t.high < 0 else "shrinks" if t.low > 0 else "holds" if all(present) else "inconclusive"
    return [
        f"- **The gated FFNs' lead {label} with size.** Slope of the lead (mean(SwiGLU, GeGLU) − mean(ReLU, GELU) "
        f"on {METRIC}) against ln(non-embedding parameters): {t.slope:+.4f} per e-fold [{t.low:+.4f}, "
        f"{t.high:+.4f}] (bootstrap over seeds); the lead is present (CI below 0) at {sum(present)} of "
        f"{len(sizes)} sizes.",
        "",
        *rows,
    ]


def main(argv: list[str] | None = None) -> int:
    return table_script.run_lines(argv, __doc__, verdicts, "ladder_verdict.md")


if __name__ == "__main__":
    raise SystemExit(main())
