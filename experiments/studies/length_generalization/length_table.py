"""Exact-match accuracy per instance length from a sweep's ledger (length-generalisation study).

    python -m experiments.studies.length_generalization.length_table \
experiments/studies/length_generalization/results/length_generalization
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from contract.run_folder import DONE
from experiments.records.layout import LEDGER_NAME
from experiments.records.ledger import Ledger
from experiments.studies import table_script


def table(sweep_dir: Path) -> str:
    rows = [r for r in Ledger(sweep_dir / LEDGER_NAME).rows.values() if r["status"] == DONE]
    lengths = sorted({int(m.group(1)) for k in rows[0] for m in [re.fullmatch(r"val/exact_match@(\d+)", k)] if m})
    cells = list(dict.fromkeys(r["cell"] for r in rows))

    def median(cell: str, key: str) -> str:
        values = [float(r[key]) for r in rows if r["cell"] == cell and r.get(key)]
        return f"{statistics.median(values):.2f}" if values else "n/a"

    lines = [
        f"Median over seeds of exact-match accuracy per instance length ({sweep_dir.name}; "
        f"`python -m experiments.studies.length_generalization.length_table {sweep_dir}`).",
        "",
        "| cell | in distribution | out of distribution | " + " | ".join(map(str, lengths)) + " |",
        "| --- | ---: | ---: | " + " | ".join("---:" for _ in lengths) + " |",
    ]
    for cell in cells:
        per_length = " | ".join(median(cell, f"val/exact_match@{n}") for n in lengths)
        lines.append(
            f"| {cell} | {median(cell, 'val/exact_match_id')} | {median(cell, 'val/exact_match_ood')} | {per_length} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return table_script.run(argv, __doc__, table, "accuracy_by_length.md")


if __name__ == "__main__":
    raise SystemExit(main())
