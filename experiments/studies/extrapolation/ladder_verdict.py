"""The extrapolation ladder's verdict, derived from its ledger by the rule its spec states before any run
(`extrapolation_ladder.yaml`): ALiBi against RoPE at 4x the training length at each size, ALiBi's flatness to
8x, and how the 4x gap and the in-distribution gap move with size. A size whose comparison touches a cell whose
learning-rate search left an end open is inconclusive by the bracketing rule (`analysis.decisions`), and so
is a trend that rests on it.

    python -m experiments.studies.extrapolation.ladder_verdict \
experiments/studies/extrapolation/results/extrapolation_ladder
"""

from __future__ import annotations

from pathlib import Path

from experiments.analysis import decisions as rules
from experiments.analysis.decisions import interval as _interval
from experiments.analysis.stats import paired_difference
from experiments.studies import table_script
from experiments.studies.ladder_trend import ladder_cells, per_seed, trend

AT_4X, AT_8X, AT_1X = "test/loss@256", "test/loss@512", "test/loss@64"
IN_DISTRIBUTION = "test/loss"
FLAT = 0.01  # "ALiBi stays flat": its 8x − 1x loss at most this (upper CI bound) at every size
ALIBI, ROPE = "pos_encoding=alibi", "pos_encoding=rope"


def verdicts(sweep_dir: Path) -> list[str]:
    """One bullet per pre-registered check, then the per-size table."""
    ladder = ladder_cells(sweep_dir, AT_4X)
    if ladder.missing:
        return [f"- the final runs of {ladder.missing} (scheme, size) cell(s) have not ended: no verdict yet"]
    sizes = ladder.sizes
    rows = ["| size | non-embedding parameters | ALiBi − RoPE at 4× | ALiBi 8× − 1× | RoPE − ALiBi at 1× |",
            "|---|---:|---|---|---|"]  # fmt: skip
    gaps, in_dist, better, flat, guards = {}, {}, [], [], []
    for size in sizes:
        alibi, rope = ladder.at[(ALIBI, size)], ladder.at[(ROPE, size)]
        n = rope.stat("params_non_embedding")
        gap = paired_difference(alibi.values(AT_4X), rope.values(AT_4X))
        rise = paired_difference(alibi.values(AT_8X), alibi.values(AT_1X))
        inside = paired_difference(rope.values(IN_DISTRIBUTION), alibi.values(IN_DISTRIBUTION))
        gaps[n] = per_seed(alibi.values(AT_4X), rope.values(AT_4X))
        in_dist[n] = per_seed(rope.values(IN_DISTRIBUTION), alibi.values(IN_DISTRIBUTION))
        edges = ladder.edges((ALIBI, size), (ROPE, size))
        guards.append(rules.bracketing(edges, edges))
        better.append(rules.decide(rules.direction(gap, "below"), guards[-1]))
        holds = rules.noninferior(rise, FLAT)  # a CI that holds +0.01, or none (one seed), says neither
        flat.append(rules.decide(holds, rules.bracketing(edges, [f"{ALIBI},size={size}"])))
        mark = "" if guards[-1] is None else " †"
        rows.append(f"| {size}{mark} | {n:,.0f} | {_interval(gap)} | {_interval(rise)} | {_interval(inside)} |")
    label = _per_size(sizes, better, "holds at every size", "reverses at")
    flat_label = _per_size(sizes, flat, "holds at every size", "does not hold at")
    gap_trend, in_trend = trend(gaps), trend(in_dist)
    trend_verdict = rules.decide(rules.Verdict("read"), *guards)  # a trend rests on every size
    edges = rules.reasons([g for g in guards if g])
    return [
        f"- **ALiBi extrapolates better than RoPE (4×, {AT_4X}): {label}.** ALiBi − RoPE has a 95% CI below 0, "
        f"bracketed, at {sum(v.label == rules.REPRODUCED for v in better)} of {len(sizes)} sizes.",
        f"- **ALiBi stays flat to 8×: {flat_label}** (8× − 1× at most +{FLAT}, CI upper bound, bracketed, at "
        f"{sum(v.label == rules.REPRODUCED for v in flat)} of {len(sizes)} sizes).",
        f"- **How the gaps move with size** (slope against ln(non-embedding parameters), bootstrap 95% CI over "
        f"seeds): ALiBi − RoPE at 4× {gap_trend.slope:+.4f} [{gap_trend.low:+.4f}, {gap_trend.high:+.4f}] per "
        f"e-fold; RoPE − ALiBi at 1× {in_trend.slope:+.4f} [{in_trend.low:+.4f}, {in_trend.high:+.4f}]"
        + (f"; {trend_verdict} (it rests on every size, †)." if trend_verdict.guard else "."),
        "",
        *rows,
        *([f"† inconclusive by the bracketing rule ({edges})."] if edges else []),
    ]


def _per_size(sizes: list[str], verdicts: list[rules.Verdict], every: str, against: str) -> str:
    """`every` when each size reproduces; `against` the sizes that do not (by a clean CI); else inconclusive at
    the rest, by the bracketing rule where a guard kept them."""
    if all(v.label == rules.REPRODUCED for v in verdicts):
        return every
    negative = [s for s, v in zip(sizes, verdicts) if v.label == rules.NOT_REPRODUCED]
    if negative:
        return f"{against} " + ", ".join(negative)
    rest = [s for s, v in zip(sizes, verdicts) if v.label != rules.REPRODUCED]
    guarded = " by the bracketing rule" if all(v.guard for s, v in zip(sizes, verdicts) if s in rest) else ""
    return f"inconclusive{guarded} at " + ", ".join(rest)


def main(argv: list[str] | None = None) -> int:
    return table_script.run_lines(argv, __doc__, verdicts, "ladder_verdict.md")


if __name__ == "__main__":
    raise SystemExit(main())
