"""Statistics of a sweep: per-cell summaries over seeds and paired differences from the baseline."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
PAIRED_TEST = "paired two-sided t-test over seeds (scipy.stats.ttest_rel)"


@dataclass(frozen=True)
class Summary:
    """Mean, sample standard deviation and a t confidence interval of one cell's values.

    std and the interval are nan below two values; everything is nan with none.
    """

    n: int
    mean: float
    std: float
    ci_low: float
    ci_high: float


def summarize(values: Sequence[float], confidence: float = CONFIDENCE) -> Summary:
    """Summarizes a cell's per-seed values.

    Args:
        values: one finite value per finished run.
        confidence: coverage of the interval, from Student's t with n-1 degrees of freedom.
    """
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        return Summary(0, math.nan, math.nan, math.nan, math.nan)
    mean = float(x.mean())
    if n < 2:
        return Summary(1, mean, math.nan, math.nan, math.nan)
    std = float(x.std(ddof=1))
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * std / math.sqrt(n)
    return Summary(n, mean, std, mean - half, mean + half)


@dataclass(frozen=True)
class Comparison:
    """A cell minus the baseline, over the seeds both finished.

    Args:
        n: seeds in common.
        diff: mean of the per-seed differences (nan without common seeds).
        p_value: paired t-test; nan below two pairs or when the differences do not vary.
    """

    n: int
    diff: float
    p_value: float


def paired_difference(cell: Mapping[int, float], baseline: Mapping[int, float]) -> Comparison:
    """Compares a cell with the baseline seed by seed (same seed = same data order and init noise).

    Args:
        cell: seed -> value.
        baseline: seed -> value.
    """
    seeds = sorted(set(cell) & set(baseline))
    if not seeds:
        return Comparison(0, math.nan, math.nan)
    a = np.array([cell[s] for s in seeds], dtype=float)
    b = np.array([baseline[s] for s in seeds], dtype=float)
    diff = float((a - b).mean())
    if len(seeds) < 2:
        return Comparison(len(seeds), diff, math.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant differences: p is nan, shown n/a
        p = float(stats.ttest_rel(a, b).pvalue)
    return Comparison(len(seeds), diff, p)
