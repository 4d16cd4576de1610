"""Scaling fits for a model ladder: a saturating power law per cell, L(N) = E + A·N^−α, with bootstrap CIs
over seeds, and where two cells' fitted curves cross.

Written here rather than taken from a library: curve fitting is scipy's (`curve_fit`), but the protocol
around it (a seed bootstrap per size, a crossing with a CI, the warnings a reader needs when four points fit
three parameters) is what a ladder report needs and no well-kept package offers.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import OptimizeWarning, brentq, curve_fit

PARAMETERS = 3  # E, A, α
LARGE_RESIDUAL = 0.01  # a fit whose RMS residual exceeds 1% of the mean loss is flagged
BOOTSTRAP = 1000
FEW_SEEDS = 5  # below this, resampling seeds understates the spread (3 seeds: ~75-85% coverage of a "95%" CI)


def law(n: np.ndarray, e: float, a: float, alpha: float) -> np.ndarray:
    return e + a * np.power(n, -alpha)


@dataclass(frozen=True)
class PowerLaw:
    """A fitted L(N) = E + A·N^−α over sizes `n_min` … `n_max`, with its RMS residual on the mean losses."""

    e: float
    a: float
    alpha: float
    n_min: float
    n_max: float
    rms: float

    def __call__(self, n: float | np.ndarray) -> float | np.ndarray:
        return law(np.asarray(n, dtype=float), self.e, self.a, self.alpha)

    def extrapolates(self, n: float) -> bool:
        """Whether `n` lies outside the sizes the fit saw (a prediction there is an extrapolation)."""
        return not self.n_min <= n <= self.n_max


def fit(n: Sequence[float], loss: Sequence[float]) -> PowerLaw | None:
    """Least-squares fit of L = E + A·N^−α (E ≥ 0, A > 0, 0 < α < 2) to one loss per size; None when it fails
    or there are fewer sizes than parameters."""
    n, loss = np.asarray(n, dtype=float), np.asarray(loss, dtype=float)
    if len(n) < PARAMETERS or not np.all(np.isfinite(loss)):
        return None
    order = np.argsort(n)
    n, loss = n[order], loss[order]
    e0 = 0.9 * float(loss.min())
    alpha0 = 0.3
    a0 = max(float(loss[0] - e0), 1e-6) * n[0] ** alpha0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            (e, a, alpha), _ = curve_fit(
                law, n, loss, p0=(e0, a0, alpha0), bounds=([0.0, 1e-12, 1e-4], [np.inf, np.inf, 2.0]), maxfev=2000
            )
    except (RuntimeError, ValueError):
        return None
    rms = float(np.sqrt(np.mean((law(n, e, a, alpha) - loss) ** 2)))
    return PowerLaw(float(e), float(a), float(alpha), float(n[0]), float(n[-1]), rms)


@dataclass(frozen=True)
class LadderFit:
    """One cell's fit on its seed means, and percentile CIs of E, A, α from a bootstrap over seeds.

    Args:
        point: the fit to the mean loss at each size.
        ci: parameter name -> (low, high), 95%.
        samples: the bootstrap fits (the crossing CI reuses them).
        warnings: what a reader should know (too few sizes, large residuals, failed resamples).
    """

    point: PowerLaw
    ci: dict[str, tuple[float, float]]
    samples: list[PowerLaw] = field(repr=False)
    warnings: list[str]


def fit_means(by_size: Mapping[float, Sequence[float]]) -> PowerLaw | None:
    """The fit to a cell's mean loss at each size (size N -> each seed's loss), without `fit_ladder`'s bootstrap:
    what a plot of the curve needs, at a thousandth of the cost."""
    sizes = sorted(n for n, v in by_size.items() if len(v))
    return fit(sizes, [float(np.mean(by_size[n])) for n in sizes])


def fit_ladder(
    by_size: Mapping[float, Sequence[float]], seed: int = 0, resamples: int | None = None
) -> LadderFit | None:
    """Fits a cell's ladder: size N -> final loss of each seed. The bootstrap resamples the seeds at each size
    independently (with replacement; `resamples`, default `BOOTSTRAP`) and refits; None when the mean losses
    cannot be fitted."""
    resamples = resamples or BOOTSTRAP
    sizes = sorted(n for n, v in by_size.items() if len(v))
    means = [float(np.mean(by_size[n])) for n in sizes]
    point = fit(sizes, means)
    if point is None:
        return None
    notes = []
    if len(sizes) <= PARAMETERS:
        notes.append(
            f"{len(sizes)} sizes for {PARAMETERS} parameters: the law is not tested (a curve this flexible fits any "
            "3 points), and its CIs say little"
        )
    if point.rms > LARGE_RESIDUAL * float(np.mean(means)):
        notes.append(f"large residuals: RMS {point.rms:.4f} against a mean loss of {np.mean(means):.3f}")
    if all(len(by_size[n]) == 1 for n in sizes):  # one seed per size: nothing to resample, no interval
        return LadderFit(point, {}, [], [*notes, "one seed per size: no confidence intervals"])
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(resamples):
        resampled = [float(np.mean(rng.choice(np.asarray(by_size[n], dtype=float), len(by_size[n])))) for n in sizes]
        sample = fit(sizes, resampled)
        if sample is not None:
            samples.append(sample)
    ci = {
        name: tuple(float(q) for q in np.percentile([getattr(s, name) for s in samples], [2.5, 97.5]))
        for name in ("e", "a", "alpha")
    } if samples else {}  # fmt: skip
    if min(len(by_size[n]) for n in sizes) < FEW_SEEDS:
        notes.append(
            f"a bootstrap over fewer than {FEW_SEEDS} seeds per size understates the spread: read its CIs as too narrow"
        )
    if len(samples) < resamples:
        notes.append(f"{resamples - len(samples)} of {resamples} bootstrap resamples did not fit")
    return LadderFit(point, ci, samples, notes)


@dataclass(frozen=True)
class Crossing:
    """Where two cells' fitted curves cross inside the ladder's sizes.

    Args:
        n: the crossing size of the point fits; None when they do not cross within the ladder.
        ci: 95% percentile interval of the crossing over paired bootstrap fits that cross; None without any.
        fraction: the share of paired bootstrap fits that cross within the ladder.
    """

    n: float | None
    ci: tuple[float, float] | None
    fraction: float


def crossing_point(first: PowerLaw, second: PowerLaw, n_min: float, n_max: float) -> float | None:
    """The size in [n_min, n_max] where the two curves are equal (the first sign change of their difference on
    a log grid, refined by root finding); None when the difference keeps its sign."""
    grid = np.geomspace(n_min, n_max, 200)
    diff = first(grid) - second(grid)
    changes = np.nonzero(np.sign(diff[:-1]) * np.sign(diff[1:]) < 0)[0]
    if not len(changes):
        return None
    i = int(changes[0])
    gap = lambda log_n: float(first(math.exp(log_n)) - second(math.exp(log_n)))  # noqa: E731
    return math.exp(brentq(gap, math.log(grid[i]), math.log(grid[i + 1])))


def crossing(first: LadderFit, second: LadderFit) -> Crossing:
    """Whether and where two cells' curves cross within the sizes both were trained at, with a CI from their
    bootstrap fits paired in order (independent resamples of each cell's seeds)."""
    n_min = max(first.point.n_min, second.point.n_min)
    n_max = min(first.point.n_max, second.point.n_max)
    at = crossing_point(first.point, second.point, n_min, n_max)
    pairs = list(zip(first.samples, second.samples))
    found = [c for a, b in pairs if (c := crossing_point(a, b, n_min, n_max)) is not None]
    ci = tuple(float(q) for q in np.percentile(found, [2.5, 97.5])) if found else None
    return Crossing(at, ci, len(found) / len(pairs) if pairs else math.nan)
