"""A sweep's validation loss at every validation step (mean ± std over seeds, per cell) and its other
validation metrics at the last step: the curves behind a study's "when did it leave the plateau" tables.

The ledger keeps only a run's final metrics; the earlier validations are in its TensorBoard events.

    python -m experiments.studies.loss_by_step \
experiments/studies/mlm_positional/results/mlm_positional_3k
"""

from __future__ import annotations

import math
from pathlib import Path

from contract.run_folder import DONE
from experiments.records.events import read_scalars
from experiments.records.layout import LEDGER_NAME
from experiments.records.ledger import Ledger
from experiments.studies import table_script

CURVE = "val/loss"


def _final(curve: dict[int, float]) -> float | None:
    finite = [step for step, value in curve.items() if math.isfinite(value)]
    return curve[max(finite)] if finite else None


def table(sweep_dir: Path) -> str:
    """The markdown table of the sweep's finished runs (written to `loss_by_step.md`)."""
    per_cell: dict[str, list[dict[str, dict[int, float]]]] = {}  # cell -> one curves dict per seed
    for row in Ledger(sweep_dir / LEDGER_NAME).rows.values():
        if row["status"] == DONE:
            curves = read_scalars(sweep_dir / row["cell"] / f"seed{row['seed']}").curves
            per_cell.setdefault(row["cell"], []).append(curves)
    runs = [curves for seeds in per_cell.values() for curves in seeds]
    # finite values only: the HParams session logs a nan placeholder at step 0
    steps = sorted({step for curves in runs for step, value in curves.get(CURVE, {}).items() if math.isfinite(value)})
    if not steps:
        raise SystemExit(f"{sweep_dir}: no finished run logged {CURVE}")
    # the run's other scalar validation metrics (per-length losses are the extrapolation tables' job)
    others = sorted({tag for curves in runs for tag in curves if tag.startswith("val/") and "@" not in tag} - {CURVE})
    command = f"python -m experiments.studies.loss_by_step {sweep_dir}"
    columns = [*(f"step {s + 1}" for s in steps), *(f"{tag} (last)" for tag in others)]
    lines = [
        f"{CURVE} per validation step and the other validation metrics at the last step, mean ± std over "
        f"seeds ({sweep_dir.name}, `{command}`).",
        "",
        "| cell | seeds | " + " | ".join(columns) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in columns) + " |",
    ]
    for cell, seeds in per_cell.items():
        at_step = [[c[CURVE][s] for c in seeds if math.isfinite(c.get(CURVE, {}).get(s, math.nan))] for s in steps]
        last = [[v for c in seeds if (v := _final(c.get(tag, {}))) is not None] for tag in others]
        cells = [table_script.mean_std(values) for values in at_step + last]
        lines.append(f"| {cell} | {len(seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return table_script.run(argv, __doc__, table, "loss_by_step.md")


if __name__ == "__main__":
    raise SystemExit(main())
