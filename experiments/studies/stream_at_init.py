"""How much a sweep's blocks write into the residual stream at initialisation, from its runs' own diagnostics: the
stream's RMS after the first and the last block at the first probed step (step 0, before any update) and the
growth ln(last / first) between them (`diagnostics/residual_growth`), mean ± std over each cell's final seeds.

A growth near 0 means the blocks after the first add almost nothing to the stream they start on: a variant whose
blocks start near-silent trains from a different place than one whose blocks do not, which a comparison of the two
should know (a build that differs from the authors', e.g. a fixed init std at a width far below theirs).

    python -m experiments.studies.stream_at_init experiments/studies/ffn_norm/results/ffn_norm_ladder
"""

from __future__ import annotations

import math
from pathlib import Path

from contract.run_folder import DONE
from experiments.records.events import read_scalars
from experiments.records.layout import LEDGER_NAME
from experiments.records.ledger import PHASE_COLUMN, SEARCH_PHASE, Ledger
from experiments.studies import table_script

RMS = "diagnostics/residual_rms/"
GROWTH = "diagnostics/residual_growth"


def _first_probe(curves: dict[str, dict[int, float]]) -> tuple[float, float, float] | None:
    """(RMS after the first block, after the last, the growth) at the run's first probed step; None unprobed."""
    blocks = sorted((tag for tag in curves if tag.startswith(RMS)), key=lambda t: int(t.rpartition("block")[2]))
    if not blocks or GROWTH not in curves:
        return None
    step = min(curves[GROWTH])
    return curves[blocks[0]][step], curves[blocks[-1]][step], curves[GROWTH][step]


def table(sweep_dir: Path) -> str:
    """The markdown table of the sweep's final runs (written to `stream_at_init.md`)."""
    per_cell: dict[str, list[tuple[float, float, float]]] = {}
    for row in Ledger(sweep_dir / LEDGER_NAME).rows.values():
        if row["status"] == DONE and row.get(PHASE_COLUMN) != SEARCH_PHASE:
            probe = _first_probe(read_scalars(sweep_dir / row["cell"] / f"seed{row['seed']}").curves)
            if probe is not None:
                per_cell.setdefault(row["cell"], []).append(probe)
    if not per_cell:
        raise SystemExit(f"{sweep_dir}: no finished final run logged {GROWTH} (the Diagnostics callback's)")
    command = f"python -m experiments.studies.stream_at_init {sweep_dir}"
    lines = [
        f"The residual stream at initialisation (the first probed step), mean ± std over seeds ({sweep_dir.name}, "
        f"`{command}`): its RMS after the first and the last block, and ln(last / first).",
        "",
        "| cell | seeds | RMS after the first block | RMS after the last block | growth ln(last / first) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for cell, probes in per_cell.items():
        columns = [table_script.mean_std([p[i] for p in probes if math.isfinite(p[i])], 4) for i in range(3)]
        lines.append(f"| {cell} | {len(probes)} | " + " | ".join(columns) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return table_script.run(argv, __doc__, table, "stream_at_init.md")


if __name__ == "__main__":
    raise SystemExit(main())
