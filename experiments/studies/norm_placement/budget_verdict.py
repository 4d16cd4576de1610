"""Study 22's verdicts, derived from its ledger by the rules `norm_placement_budget.yaml` states before any run:
Pre-LN's warmup gain g(h) = pre-warmup0 − pre-warmup200 and Post-LN's deficit d(h) = post-warmup200 −
pre-warmup200 on test/loss at each horizon h, paired by seed; "shrinks" compares the shortest horizon's with the
longest's seed by seed (g(800) − g(12,800): a difference of paired differences), "needs no warmup" is g at the
longest horizon equivalent to 0 within ±0.03. A comparison touching a cell whose search ended unbracketed, or one
that never left the unigram loss, is inconclusive by rule (`analysis.decisions`). `budget_verdict.md` also tables
each (cell, horizon)'s chosen rate and test loss; beside it, `budget_gaps.png` (both differences against training
steps, each seed's: the figure the verdicts read).

    python -m experiments.studies.norm_placement.budget_verdict \\
        experiments/studies/norm_placement/results/norm_placement_budget
"""

from __future__ import annotations

from pathlib import Path

from experiments.analysis import decisions as rules
from experiments.analysis import plots
from experiments.analysis.stats import paired_difference
from experiments.analysis.sweep_results import load
from experiments.studies import table_script
from experiments.studies.horizon_cells import HorizonCells, branched

METRIC, MARGIN, UNIGRAM = "test/loss", 0.03, 3.35
NO_WARMUP, WARMUP, POST = "pre-warmup0", "pre-warmup200", "post-warmup200"


def verdicts(sweep_dir: Path) -> list[str]:
    study = HorizonCells(branched(load(sweep_dir)), METRIC, UNIGRAM)
    if study.missing():
        return [f"- no final runs yet for {', '.join(study.missing())}: no verdict"]
    short, long = study.horizons[0], study.horizons[-1]
    lines = []
    for wording, a, b in (("Pre-LN's warmup gain shrinks as training lengthens", NO_WARMUP, WARMUP),
                          ("Post-LN's deficit shrinks as training lengthens", POST, WARMUP)):  # fmt: skip
        at = {h: study.difference(a, b, h) for h in study.horizons}
        trend = paired_difference(at[short], at[long], MARGIN)
        verdict = rules.decide(rules.direction_not_level(trend, "above"), *study.guards(short, a, b),
                               *study.guards(long, a, b))  # fmt: skip
        each = "; ".join(f"{h}: {rules.interval(study.between(a, b, h))}" for h in study.horizons)
        lines.append(f"- **{wording}: {verdict}.**{rules.why(verdict)} {a} − {b} by horizon: {each}; at {short} − at "
                     f"{long}: {rules.interval(trend, tost=True)}.")  # fmt: skip
    gain = paired_difference(study.values(NO_WARMUP, long), study.values(WARMUP, long), MARGIN)
    verdict = rules.decide(rules.equivalence(gain), *study.guards(long, NO_WARMUP, WARMUP))
    lines.append(f"- **Pre-LN needs no warmup at {long:,} steps: {verdict}.**{rules.why(verdict)} {NO_WARMUP} − "
                 f"{WARMUP}: {rules.interval(gain, tost=True)}.")  # fmt: skip
    return [*lines, "", *table(study)]


def table(study: HorizonCells) -> list[str]:
    rows = ["| cell | " + " | ".join(f"{h:,} steps: lr, test/loss" for h in study.horizons) + " |",
            "|---|" + "---|" * len(study.horizons)]  # fmt: skip
    for cell in (NO_WARMUP, WARMUP, POST):
        entries = []
        for h in study.horizons:
            chosen = study.chosen(cell, h)
            lr = f"{chosen:g}" if chosen else "n/a"
            entries.append(f"{lr}, {table_script.mean_std(list(study.values(cell, h).values()))}")
        rows.append(f"| {cell} | " + " | ".join(entries) + " |")
    return rows


def plot(sweep_dir: Path) -> bool:
    """Pre-LN's warmup gain and Post-LN's deficit against training steps: per seed, the paired difference at each
    horizon (line: the mean, band: min–max over seeds; dashed: no difference). Drawn once every final run is in."""
    study = HorizonCells(branched(load(sweep_dir)), METRIC, UNIGRAM)
    if study.missing():
        return False
    points = {f"{a} − {b}": {float(h): list(study.difference(a, b, h).values()) for h in study.horizons}
              for a, b in ((NO_WARMUP, WARMUP), (POST, WARMUP))}  # fmt: skip
    return plots.budget_curves(points, "training steps", f"{METRIC} difference", sweep_dir / "budget_gaps.png", 0.0)


def main(argv: list[str] | None = None) -> int:
    return table_script.run_lines(argv, __doc__, verdicts, "budget_verdict.md", then=plot)


if __name__ == "__main__":
    raise SystemExit(main())
