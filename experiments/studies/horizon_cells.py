"""A budget study's cells across training lengths, as its verdict reads them: (cell, horizon) -> its sweep and its
cell's name there, from a `horizons:` sweep (its branches) and from plain sweeps (a cell per `trainer.max_steps`).
What both budget verdicts (schedules, norm_placement) share: each (cell, horizon)'s final values and chosen rate,
which have not ended, and the bracketing and floor guards of a comparison at one horizon."""

from __future__ import annotations

from experiments.analysis import decisions as rules
from experiments.analysis.stats import Comparison, paired_difference
from experiments.analysis.sweep_results import SweepResults

Where = dict[tuple[str, int], tuple[SweepResults, str]]


def branched(sweep: SweepResults) -> Where:
    """A `horizons:` sweep's cells: (cell, horizon) -> its branch cell."""
    return {tuple(pair): (sweep, name) for name, pair in sweep.info["horizons"]["cells"].items()}


def separate(sweep: SweepResults, cell: str) -> Where:
    """A plain sweep whose cells differ by `trainer.max_steps`: each as `cell` at that horizon."""
    return {(cell, c["overrides"]["trainer.max_steps"]): (sweep, c["name"]) for c in sweep.info["cells"]}


class HorizonCells:
    """Args:
    where: (cell, horizon) -> (its sweep, its cell's name there).
    metric: what the verdicts compare (a test metric of the final runs).
    floor: the metric's starting value (the unigram loss): a cell not beyond it never left its floor.
    margin: the equivalence margin of `between`'s comparisons (None: none).
    """

    def __init__(self, where: Where, metric: str, floor: float, margin: float | None = None):
        self.where, self.metric, self.floor, self.margin = where, metric, floor, margin
        self.horizons = sorted({h for _, h in where})

    def values(self, cell: str, horizon: int, metric: str | None = None) -> dict[int, float]:
        """seed -> the final runs' `metric` (the study's by default)."""
        sweep, name = self.where[(cell, horizon)]
        found = sweep.cells.get(name)
        return found.values(metric or self.metric) if found else {}

    def chosen(self, cell: str, horizon: int) -> float | None:
        """The tuned rate its final runs used (None before its search chose)."""
        sweep, name = self.where[(cell, horizon)]
        point = sweep.chosen(name)
        return point[0] if point else None

    def missing(self) -> list[str]:
        """The (cell, horizon)s without a finished final run (the verdicts and the plots wait for them)."""
        return [f"{c} at {h}" for (c, h) in self.where if not self.values(c, h)]

    def between(self, a: str, b: str, horizon: int, metric_a: str | None = None) -> Comparison:
        """a − b at `horizon`, paired by seed (a's `metric_a`, e.g. its averaged weights', against b's metric)."""
        return paired_difference(self.values(a, horizon, metric_a), self.values(b, horizon), self.margin)

    def difference(self, a: str, b: str, horizon: int) -> dict[int, float]:
        """seed -> a − b at `horizon`, over the seeds both have."""
        va, vb = self.values(a, horizon), self.values(b, horizon)
        return {s: va[s] - vb[s] for s in sorted(set(va) & set(vb))}

    def guards(self, horizon: int, *cells: str) -> list[rules.Guard | None]:
        """The bracketing and floor guards of a comparison at `horizon` touching `cells`."""
        out = []
        for cell in cells:
            sweep, name = self.where[(cell, horizon)]
            out.append(rules.bracketing(sweep.unbracketed(), [name]))
            out.append(rules.floor(self.values(cell, horizon), self.floor, False, f"{cell} at {horizon}"))
        return out
