"""Degradation against training: each scheme's loss at the longest evaluation length divided by its
loss at the training length, at every validation step of an extrapolation sweep (mean ± std over
seeds), and the change of that ratio from the first to the last validation, paired by seed.

The ledger keeps only a run's final metrics; the earlier validations are in its TensorBoard events.

    python -m experiments.studies.extrapolation.ratio_by_step \
experiments/studies/extrapolation/results/extrapolation_long
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from contract.run_folder import DONE
from experiments.analysis.stats import paired_difference
from experiments.records.events import read_scalars
from experiments.records.layout import LEDGER_NAME
from experiments.records.ledger import Ledger
from experiments.studies import table_script

LENGTH_TAG = re.compile(r"val/loss@(\d+)")


def ratios(run_dir: Path) -> tuple[int, int, dict[int, float]]:
    """(training length, longest length, {step: loss@longest / loss@training}) of one run, whose
    shortest evaluation length is the training length (the study's protocol); steps where either
    loss is not finite (a scheme without positions past its training length logs nan) are left out."""
    curves = read_scalars(run_dir).curves
    lengths = sorted(int(m.group(1)) for tag in curves if (m := LENGTH_TAG.fullmatch(tag)))
    if len(lengths) < 2:
        return (lengths[0] if lengths else 0), 0, {}
    short, long = curves[f"val/loss@{lengths[0]}"], curves[f"val/loss@{lengths[-1]}"]
    steps = sorted(s for s in set(short) & set(long) if math.isfinite(short[s]) and math.isfinite(long[s]))
    return lengths[0], lengths[-1], {step: long[step] / short[step] for step in steps}


def table(sweep_dir: Path) -> str:
    """The markdown table of the sweep's finished runs (written to `ratio_by_step.md`)."""
    rows = [r for r in Ledger(sweep_dir / LEDGER_NAME).rows.values() if r["status"] == DONE]
    per_cell: dict[str, dict[int, dict[int, float]]] = {}  # cell -> seed -> step -> ratio
    lengths = (0, 0)
    for row in rows:
        short, long, by_step = ratios(sweep_dir / row["cell"] / f"seed{row['seed']}")
        if by_step:
            per_cell.setdefault(row["cell"], {})[int(row["seed"])] = by_step
            lengths = (short, long)
    steps = sorted({step for seeds in per_cell.values() for by_step in seeds.values() for step in by_step})
    if not steps:
        raise SystemExit(f"{sweep_dir}: no finished run evaluated at two lengths")
    first, last = steps[0], steps[-1]
    command = f"python -m experiments.studies.extrapolation.ratio_by_step {sweep_dir}"
    lines = [
        f"Loss at {lengths[1]} ÷ loss at {lengths[0]} tokens per validation step, mean ± std over seeds "
        f"({sweep_dir.name}, `{command}`); last column: the ratio's change from step {first + 1} to "
        f"{last + 1}, paired by seed, with its 95% CI and p.",
        "",
        "| cell | seeds | " + " | ".join(f"step {s + 1}" for s in steps) + f" | change {first + 1} → {last + 1} |",
        "| --- | ---: | " + " | ".join("---:" for _ in steps) + " | --- |",
    ]
    for cell, seeds in per_cell.items():
        at = {s: [by_step[s] for by_step in seeds.values() if s in by_step] for s in steps}
        change = paired_difference(
            {seed: r[last] for seed, r in seeds.items() if last in r},
            {seed: r[first] for seed, r in seeds.items() if first in r},
        )
        shown = "n/a"
        if change.n > 1 and math.isfinite(change.p_value):
            shown = f"{change.diff:+.3f} [{change.ci_low:+.3f}, {change.ci_high:+.3f}], p = {change.p_value:.2g}"
        means = " | ".join(table_script.mean_std(at[s]) for s in steps)
        lines.append(f"| {cell} | {len(seeds)} | {means} | {shown} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return table_script.run(argv, __doc__, table, "ratio_by_step.md")


if __name__ == "__main__":
    raise SystemExit(main())
