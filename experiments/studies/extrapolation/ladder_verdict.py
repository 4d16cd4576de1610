"""The extrapolation ladder's verdict, derived from its ledger by the rule its spec states before any run
(`extrapolation_ladder.yaml`): ALiBi against RoPE at 4x the training length at each size, ALiBi's flatness to
8x, and how the 4x gap and the in-distribution gap move with size.

    python -m experiments.studies.extrapolation.ladder_verdict \
experiments/studies/extrapolation/results/extrapolation_ladder
"""

from __future__ import annotations

from pathlib import Path

from experiments.analysis.formatting import p_text
from experiments.analysis.stats import Comparison, paired_difference
from experiments.studies import table_script
from experiments.studies.ladder_trend import ladder_cells, per_seed, trend

AT_4X, AT_8X, AT_1X = "test/loss@256", "test/loss@512", "test/loss@64"
IN_DISTRIBUTION = "test/loss"
FLAT = 0.01  # "ALiBi stays flat": its 8x − 1x loss at most this (upper CI bound) at every size
ALIBI, ROPE = "pos_encoding=alibi", "pos_encoding=rope"


def _interval(c: Comparison) -> str:
    return f"{c.diff:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}], p = {p_text(c.p_value)}"


def verdicts(sweep_dir: Path) -> list[str]:
    """One bullet per pre-registered check, then the per-size table."""
    sizes, at, missing = ladder_cells(sweep_dir, AT_4X)
    if missing:
        return [f"- the final runs of {missing} (scheme, size) cell(s) have not ended: no verdict yet"]
    rows = ["| size | non-embedding parameters | ALiBi − RoPE at 4× | ALiBi 8× − 1× | RoPE − ALiBi at 1× |",
            "|---|---:|---|---|---|"]  # fmt: skip
    gaps, in_dist, signs, flat = {}, {}, [], []
    for size in sizes:
        alibi, rope = at[(ALIBI, size)], at[(ROPE, size)]
        n = rope.stat("params_non_embedding")
        gap = paired_difference(alibi.values(AT_4X), rope.values(AT_4X))
        rise = paired_difference(alibi.values(AT_8X), alibi.values(AT_1X))
        inside = paired_difference(rope.values(IN_DISTRIBUTION), alibi.values(IN_DISTRIBUTION))
        gaps[n] = per_seed(alibi.values(AT_4X), rope.values(AT_4X))
        in_dist[n] = per_seed(rope.values(IN_DISTRIBUTION), alibi.values(IN_DISTRIBUTION))
        signs.append("below" if gap.ci_high < 0 else "above" if gap.ci_low > 0 else "contains")
        flat.append(rise.ci_high <= FLAT)
        rows.append(f"| {size} | {n:,.0f} | {_interval(gap)} | {_interval(rise)} | {_interval(inside)} |")
    if all(s == "below" for s in signs):
        label = "holds at every size"
    elif "above" in signs:
        label = "reverses at " + ", ".join(size for size, s in zip(sizes, signs) if s == "above")
    else:
        label = "inconclusive at " + ", ".join(size for size, s in zip(sizes, signs) if s != "below")
    gap_trend, in_trend = trend(gaps), trend(in_dist)
    return [
        f"- **ALiBi extrapolates better than RoPE (4×, {AT_4X}): {label}.** ALiBi − RoPE has a 95% CI below 0 at "
        f"{signs.count('below')} of {len(sizes)} sizes.",
        f"- **ALiBi stays flat to 8×: {'holds' if all(flat) else 'does not hold'} at every size** (8× − 1× at most "
        f"+{FLAT} at {sum(flat)} of {len(sizes)} sizes, CI upper bound).",
        f"- **How the gaps move with size** (slope against ln(non-embedding parameters), bootstrap 95% CI over "
        f"seeds): ALiBi − RoPE at 4× {gap_trend.slope:+.4f} [{gap_trend.low:+.4f}, {gap_trend.high:+.4f}] per "
        f"e-fold; RoPE − ALiBi at 1× {in_trend.slope:+.4f} [{in_trend.low:+.4f}, {in_trend.high:+.4f}].",
        "",
        *rows,
    ]


def main(argv: list[str] | None = None) -> int:
    return table_script.run_lines(argv, __doc__, verdicts, "ladder_verdict.md")


if __name__ == "__main__":
    raise SystemExit(main())
