"""How a paired difference between cells moves along a model ladder: its least-squares slope against
ln(non-embedding parameters), with a 95% interval from a bootstrap over seeds within each size, and a Welch t
interval beside it (with 2-3 seeds a size the percentile bootstrap runs narrow: a resampled mean's variance is
(n − 1)/n of the mean's, and the percentiles carry no small-sample t factor). The ladder
studies' verdict scripts state their rules with it (`ffn_norm/ladder_verdict.py`,
`extrapolation/ladder_verdict.py`); the fitted power laws of the report are shown beside, not used by them.
`ladder_cells` reads a ladder sweep with each (cell, size)'s bracketing, which the decision library's guard needs
(`analysis.decisions.bracketing`): a trend rests on every size, so one unbracketed cell makes it inconclusive."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from experiments.analysis.comparison import CellResult
from experiments.analysis.sweep_results import load

BOOTSTRAP = 4000
SEED = 0  # the bootstrap's own: the interval is a function of the ledger


@dataclass(frozen=True)
class Trend:
    slope: float  # change of the difference per e-fold of parameters
    low: float  # the bootstrap's 95% interval, which the ladder studies' pre-registered rules read
    high: float
    t_low: float = math.nan  # the Welch t 95% interval, a check beside them
    t_high: float = math.nan


def trend(differences: Mapping[float, list[float]]) -> Trend:
    """`differences`: size's parameter count -> the difference at that size, one value per seed."""
    sizes = sorted(differences)
    if len(sizes) < 2 or any(not differences[n] for n in sizes):
        return Trend(math.nan, math.nan, math.nan)
    x = np.log(np.array(sizes, dtype=float))

    def slope(means: np.ndarray) -> float:
        return float(np.polyfit(x, means, 1)[0])

    point = slope(np.array([np.mean(differences[n]) for n in sizes]))
    rng = np.random.default_rng(SEED)
    draws = np.empty(BOOTSTRAP)
    for b in range(BOOTSTRAP):
        draws[b] = slope(np.array([np.mean(rng.choice(differences[n], len(differences[n]))) for n in sizes]))
    low, high = np.percentile(draws, [2.5, 97.5])
    return Trend(point, float(low), float(high), *welch(x, [differences[n] for n in sizes], point))


def welch(x: np.ndarray, values: list[list[float]], point: float) -> tuple[float, float]:
    """The slope's 95% t interval: the least-squares slope is Σ cᵢ·meanᵢ with cᵢ = (xᵢ − x̄)/Sxx, so its variance
    is Σ cᵢ²·sᵢ²/nᵢ, with Welch-Satterthwaite degrees of freedom; NaN while a size has fewer than 2 seeds."""
    if any(len(v) < 2 for v in values):
        return math.nan, math.nan
    c = (x - x.mean()) / np.sum((x - x.mean()) ** 2)
    parts = np.array([ci**2 * np.var(v, ddof=1) / len(v) for ci, v in zip(c, values)])
    variance = float(parts.sum())
    if variance == 0:
        return point, point
    df = variance**2 / sum(part**2 / (len(v) - 1) for part, v in zip(parts, values))
    half = float(stats.t.ppf(0.975, df)) * math.sqrt(variance)
    return point - half, point + half


def per_seed(a: Mapping[int, float], b: Mapping[int, float]) -> list[float]:
    """a − b seed by seed, over the seeds both have."""
    return [a[s] - b[s] for s in sorted(set(a) & set(b))]


@dataclass(frozen=True)
class LadderCells:
    """A ladder sweep as its verdict reads it.

    Args:
        sizes: the size names, smallest first.
        at: (cell, size) -> the final runs of the (cell, size) that recorded the metric.
        missing: how many (cell, size) have no finished run with it yet.
        unbracketed: (cell, size) -> the tuned keys its search left at a grid's edge.
    """

    sizes: list[str]
    at: dict[tuple[str, str], CellResult]
    missing: int
    unbracketed: dict[tuple[str, str], list[str]]

    def edges(self, *keys: tuple[str, str]) -> dict[str, list[str]]:
        """The unbracketed keys of these (cell, size), named `cell,size=size` (for `decisions.bracketing`)."""
        return {f"{cell},size={size}": self.unbracketed.get((cell, size), []) for cell, size in keys}


def ladder_cells(sweep_dir: Path, metric: str) -> LadderCells:
    """A ladder sweep's sizes, its (cell, size) with finished runs recording `metric`, and their bracketing."""
    sweep = load(sweep_dir)
    where = {name: tuple(pair) for name, pair in sweep.info["ladder"]["cells"].items()}
    found = {pair: sweep.cells.get(name) for name, pair in where.items()}
    done = {key: result for key, result in found.items() if result is not None and result.values(metric)}
    unbracketed = {where[name]: keys for name, keys in sweep.unbracketed().items() if name in where}
    return LadderCells([s["name"] for s in sweep.info["ladder"]["sizes"]], done, len(found) - len(done), unbracketed)
