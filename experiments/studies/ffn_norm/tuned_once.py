"""The FFN ladder tuned once under µP against the ladders tuned at every size (issue 50): each ladder's verdict by
its spec's rule (`ladder_verdict`), each activation's fitted power law L(N) = E + A·N^−α, each size's decision
accuracy against the ladder's largest size, and what each ladder cost (runs, run-steps, CPU time from the ledger).

    python -m experiments.studies.ffn_norm.tuned_once experiments/studies/ffn_norm/results/ffn_norm_ladder_mup \
        experiments/studies/ffn_norm/results/ffn_norm_ladder \
        [experiments/studies/ffn_norm/results/ffn_norm_ladder_rerun]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from experiments.analysis.comparison import analyse
from experiments.analysis.ladder_report import LadderTable, ladder_table
from experiments.analysis.sweep_results import load
from experiments.studies.ffn_norm import ladder_verdict

METRIC = "test/loss"


def cost(sweep_dir: Path) -> tuple[int, int, float]:
    """(runs, run-steps, CPU hours) of every run the ledger records, searches and verifications included."""
    rows = list(load(sweep_dir).ledger.rows.values())
    steps = sum(int(float(r["steps"])) for r in rows if r.get("steps"))
    seconds = sum(float(r["wall_time_s"]) for r in rows if r.get("wall_time_s"))
    return len(rows), steps, seconds / 3600


def table(sweep_dir: Path) -> LadderTable:
    results = load(sweep_dir)
    return ladder_table(analyse(results.ledger, results.info), results.info, METRIC)


def _fit(row) -> str:
    if row.fit is None:
        return "no fit"
    low, high = row.fit.ci.get("alpha", (math.nan, math.nan))
    return f"α {row.fit.point.alpha:.2f} [{low:.2f}, {high:.2f}], E {row.fit.point.e:.3f}"


def comparison(*sweep_dirs: Path) -> list[str]:
    lines = []
    for sweep_dir in sweep_dirs:
        verdict = ladder_verdict.verdicts(sweep_dir)[0]
        ladder = table(sweep_dir)
        runs, steps, hours = cost(sweep_dir)
        accuracy = ", ".join(f"{size} {a:.2f} [{lo:.2f}, {hi:.2f}]" for size, (a, lo, hi) in
                             ladder.decision_accuracy.items()) or "n/a"  # fmt: skip
        lines += [
            f"### `{sweep_dir.name}`",
            "",
            verdict,
            f"- sizes {', '.join(ladder.sizes)}; cost {runs} runs, {steps:,} run-steps, {hours:.1f} CPU hours",
            f"- decision accuracy against {ladder.sizes[-1]}: {accuracy}",
            *(f"- {row.cell}: {_fit(row)}" for row in ladder.rows),
            "",
        ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dirs", type=Path, nargs="+", help="the tuned-once ladder first, then the others")
    args = parser.parse_args(argv)
    text = "\n".join(comparison(*args.sweep_dirs))
    (args.sweep_dirs[0] / "tuned_once.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
