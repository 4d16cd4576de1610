"""`--rerun CELL`: a cell's runs start over (after a fix in the code they use), their old results kept."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from experiments.records.layout import LEDGER_NAME, SWEEP_INFO
from experiments.records.ledger import Ledger
from experiments.sweep.claims import describe, read_claim
from experiments.sweep.runs import Run
from experiments.sweep.spec import SpecError


def supersede(out_dir: Path, ledger: Ledger, runs: list[Run], cells: list[str]) -> Path | None:
    """Makes `cells` run again from scratch (after a fix in the code they use) without losing their
    old results: their run folders and ledger rows (a tuned cell's search runs too) move to
    `DIR/superseded/<time>/`, where a
    before/after comparison can read them (`cli.py report` works on that folder too)."""
    names = list(dict.fromkeys(run.base_cell for run in runs))
    unknown = [cell for cell in cells if cell not in names]
    if unknown:
        raise SpecError(f"--rerun: no cell named {', '.join(unknown)}; the cells are: {', '.join(names)}")
    old = [run for run in runs if run.base_cell in cells and (run.dir.exists() or ledger.get(run.cell, run.seed))]
    running = [f"{run.name} ({describe(holder)})" for run in old if (holder := read_claim(run.dir))]
    if running:
        raise SpecError(f"--rerun: runs of these cells are running: {'; '.join(running)}; wait for them to end")
    if not old:
        return None
    dest = out_dir / "superseded" / time.strftime("%Y%m%d-%H%M%S")
    kept = Ledger(dest / LEDGER_NAME, ledger.axes)
    for run in old:
        if run.dir.exists():
            (dest / run.cell).mkdir(parents=True, exist_ok=True)
            shutil.move(run.dir, dest / run.cell / run.dir.name)
        row = ledger.rows.pop((run.cell, run.seed), None)
        if row:
            kept.rows[(run.cell, run.seed)] = row
    if kept.rows:
        kept.write()
        shutil.copy(out_dir / SWEEP_INFO, dest / SWEEP_INFO)
    ledger.write()
    return dest
