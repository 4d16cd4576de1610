"""A committed sweep folder as a verdict reads it: its cells' final runs, and for a tuned sweep each cell's
search and which tuned keys it left unbracketed (a ladder tuned once: a failed transfer is unbracketed). The
one loading step every study's verdict script shares."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.analysis.comparison import CellResult, analyse
from experiments.analysis.decisions import seed_spread, sensitivity_allowance
from experiments.analysis.transfer_report import TransferCheck, transfer_checks, unverified_keys
from experiments.analysis.tuning_report import CellSearch, counterparts, initial_grid, searches
from experiments.records.layout import LEDGER_NAME, SWEEP_INFO
from experiments.records.ledger import Ledger


@dataclass
class SweepResults:
    """Args:
    dir: the sweep folder.
    info: its `sweep.json`.
    ledger: its `results.csv`.
    cells: cell name -> its final runs and statistics (`comparison.analyse`).
    keys: the tuned keys ([] for a sweep without `tune:`).
    metric: the selection metric of the search (None without `tune:`).
    searches: cell name -> its search points and chosen values.
    """

    dir: Path
    info: dict[str, Any]
    ledger: Ledger
    cells: dict[str, CellResult]
    keys: list[str] = field(default_factory=list)
    metric: str | None = None
    searches: dict[str, CellSearch] = field(default_factory=dict)

    def unbracketed(self) -> dict[str, list[str]]:
        """cell -> the tuned keys its search left open (the engine's rule, `tuning.search`); a cell that ran at
        another cell's choice (`tune.search_on`, a ladder's `tune.transfer`) inherits that cell's. At a ladder's
        largest size, a transfer's check decides instead (`transfer_report`): verified, none; failed, `<key>:
        transfer failed`; not ended, `<key>: transfer pending`."""
        if not self.keys:
            return {}
        out = {name: search.unbracketed(self.keys) for name, search in self.searches.items()}
        for cell, source in self.shared().items():
            out[cell] = out.get(source, [])
        out |= unverified_keys(self.transfers())
        return {name: keys for name, keys in out.items() if keys}

    def transfers(self) -> dict[str, TransferCheck]:
        """With a ladder's `tune.transfer`: each cell at the largest size -> its transfer check; {} otherwise."""
        return transfer_checks(self.ledger, self.info) if self.keys else {}

    def missing(self, names: Iterable[str], metric: str) -> list[str]:
        """The cells among `names` without a finished final run recording `metric` (their verdict waits)."""
        return [name for name in names if name not in self.cells or not self.cells[name].values(metric)]

    def keyed(self, key: Callable[[str], Hashable]) -> dict[Any, CellResult]:
        """The cells under a study's own key (`dyt-a0.5,size=d64` -> ("dyt-a0.5", "d64"))."""
        return {key(name): cell for name, cell in self.cells.items()}

    def shared(self) -> dict[str, str]:
        """With `tune.search_on` or `tune.transfer`: each cell that did not search -> the cell whose search chose
        its point."""
        tune = self.info.get("tune") or {}
        return counterparts(self.info) if self.keys and (tune.get("search_on") or tune.get("transfer")) else {}

    def chosen(self, name: str) -> tuple[float, ...] | None:
        """The values the cell's final runs used (its counterpart's with `tune.search_on`; with `tune.transfer`,
        as transferred to its size)."""
        own, transferred = self.searches.get(name), (self.info.get("tune") or {}).get("transfer")
        if own and own.chosen or transferred:  # a transferred value: only the cell's own runs say
            return own.chosen if own else None
        search = self.searches.get(self.shared().get(name, name))
        return search.chosen if search else None

    def sensitivity_noise(self) -> tuple[float, str]:
        """The noise allowance of a difference of two cells' learning-rate sensitivities (two standard deviations,
        `decisions.sensitivity_allowance`), and how it was measured: from the search seeds' spread at each point;
        with one search seed, which cannot estimate its own noise, from the spread of the final runs' selection
        metric (the chosen point at other seeds, pooled over cells)."""
        seeds = len(self.info["tune"].get("seeds") or [0])
        grid_points = len(initial_grid(self.info, self.keys))
        spread = seed_spread(values for search in self.searches.values() for values in search.points.values())
        if seeds > 1 and math.isfinite(spread):
            how = f"from the {seeds} search seeds' spread at each point (two standard deviations of a difference)."
            return sensitivity_allowance(spread, seeds, grid_points), how
        spread = seed_spread(list(c.values(self.metric).values()) for c in self.cells.values())
        how = (
            f"one search seed cannot estimate its own noise, so the spread of the final runs' {self.metric} (the "
            "chosen point at other seeds, pooled over cells) stands in (two standard deviations of a difference)."
        )
        return sensitivity_allowance(spread, 1, grid_points), how


def load(sweep_dir: Path) -> SweepResults:
    """Reads a sweep folder's `sweep.json` and ledger; a tuned sweep's searches too."""
    info = json.loads((sweep_dir / SWEEP_INFO).read_text())
    ledger = Ledger(sweep_dir / LEDGER_NAME)
    cells = {c.name: c for c in analyse(ledger, info).cells}
    if not (info.get("tune") or {}).get("grid"):
        return SweepResults(sweep_dir, info, ledger, cells)
    keys, metric, found = searches(ledger, info)
    return SweepResults(sweep_dir, info, ledger, cells, keys, metric, found)
