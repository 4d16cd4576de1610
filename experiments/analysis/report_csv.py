"""`report.csv`: the numbers of the report's tables in full precision, one row per (metric, cell)."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from contract.metrics import higher_is_better
from contract.run_folder import ENDED
from experiments.analysis.comparison import Analysis
from experiments.analysis.formatting import has_trainable

CSV_COLUMNS = (
    "metric", "higher_is_better", "cell", "rank", "best", "runs", "done", "diverged", "failed", "n", "mean", "std",
    "ci_low", "ci_high", "diff_vs_baseline", "n_pairs", "p_value", "diff_ci_low", "diff_ci_high", "mde",
    "equivalence_margin", "equivalence_p", "params", "params_non_embedding", "flops_per_token",
)  # fmt: skip


def _full(value: float) -> str:
    return repr(value) if math.isfinite(value) else ""


def csv_rows(analysis: Analysis, axis_values: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (metric, cell): the numbers of the tables in full precision, n/a as empty."""
    rows = []
    for metric in analysis.metrics:
        best = analysis.best(metric)
        for rank, cell in enumerate(analysis.cells, 1):
            s, c = cell.summaries[metric], cell.comparisons.get(metric)
            row: dict[str, Any] = {"metric": metric, "higher_is_better": higher_is_better(metric), "cell": cell.name}
            row |= axis_values.get(cell.name, {})
            row |= {"rank": rank if metric == analysis.main else "", "best": cell.name == best, "runs": len(cell.rows)}
            row |= {status: cell.count(status) for status in ENDED}
            row |= {
                "n": s.n,
                "mean": _full(s.mean),
                "std": _full(s.std),
                "ci_low": _full(s.ci_low),
                "ci_high": _full(s.ci_high),
            }
            if c is not None:
                row |= {"diff_vs_baseline": _full(c.diff), "n_pairs": c.n, "p_value": _full(c.p_value)}
                row |= {"diff_ci_low": _full(c.ci_low), "diff_ci_high": _full(c.ci_high), "mde": _full(c.mde)}
                row |= {"equivalence_margin": _full(c.margin), "equivalence_p": _full(c.equivalence_p)}
            counts = {
                k: cell.stat(k) for k in ("params", "params_non_embedding", "params_trainable", "flops_per_token")
            }
            row |= {k: f"{v:.0f}" if math.isfinite(v) else "" for k, v in counts.items()}
            rows.append(row)
    return rows


def write_csv(path: Path, analysis: Analysis, axis_values: dict[str, dict[str, Any]]) -> None:
    """Writes `report.csv` (see `csv_rows`)."""
    with path.open("w", newline="") as f:
        columns = [*CSV_COLUMNS[:3], *analysis.axes, *CSV_COLUMNS[3:]]
        if has_trainable(analysis):
            columns.insert(columns.index("params_non_embedding") + 1, "params_trainable")
        writer = csv.DictWriter(f, fieldnames=columns, restval="", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(csv_rows(analysis, axis_values))
