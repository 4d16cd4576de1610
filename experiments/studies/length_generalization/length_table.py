"""Exact-match accuracy per instance length from a sweep's ledger (length-generalisation study).

    python -m experiments.studies.length_generalization.length_table \
experiments/studies/length_generalization/results/length_generalization
"""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path

from experiments.sweep.ledger import LEDGER_NAME, Ledger


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path)
    args = parser.parse_args(argv)
    rows = [r for r in Ledger(args.sweep_dir / LEDGER_NAME).rows.values() if r["status"] == "done"]
    lengths = sorted({int(m.group(1)) for k in rows[0] for m in [re.fullmatch(r"val/exact_match@(\d+)", k)] if m})
    cells = list(dict.fromkeys(r["cell"] for r in rows))

    def median(cell: str, key: str) -> str:
        values = [float(r[key]) for r in rows if r["cell"] == cell and r.get(key)]
        return f"{statistics.median(values):.2f}" if values else "n/a"

    lines = [
        f"Median over seeds of exact-match accuracy per instance length ({args.sweep_dir.name}; "
        f"`python -m experiments.studies.length_generalization.length_table {args.sweep_dir}`).",
        "",
        "| cell | in distribution | out of distribution | " + " | ".join(map(str, lengths)) + " |",
        "| --- | ---: | ---: | " + " | ".join("---:" for _ in lengths) + " |",
    ]
    for cell in cells:
        per_length = " | ".join(median(cell, f"val/exact_match@{n}") for n in lengths)
        lines.append(
            f"| {cell} | {median(cell, 'val/exact_match_id')} | {median(cell, 'val/exact_match_ood')} "
            f"| {per_length} |"
        )
    text = "\n".join(lines) + "\n"
    (args.sweep_dir / "accuracy_by_length.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
