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
EQUIVALENCE_TEST = "two one-sided paired t-tests (TOST) against the spec's margin"


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


POWER = 0.8  # for the smallest detectable difference


@dataclass(frozen=True)
class Comparison:
    """A cell minus its reference (the baseline), over the seeds both finished.

    Args:
        n: seeds in common.
        diff: mean of the per-seed differences (nan without common seeds).
        p_value: paired t-test; nan below two pairs or when the differences do not vary.
        ci_low, ci_high: `CONFIDENCE` interval of the mean difference (Student's t, n-1 degrees of freedom).
        mde: the smallest true difference this many seeds would detect with probability `POWER` in a
            two-sided paired test at 1 - `CONFIDENCE`, given the differences' observed spread: a null
            result says nothing about effects smaller than this.
        margin: the equivalence margin (the spec's `equivalence_margin`), nan when none is set.
        equivalence_p: two one-sided tests (TOST) of |true difference| >= margin; below
            1 - `CONFIDENCE` the two are equivalent within ±margin. nan without a margin.
    """

    n: int
    diff: float
    p_value: float
    ci_low: float = math.nan
    ci_high: float = math.nan
    mde: float = math.nan
    margin: float = math.nan
    equivalence_p: float = math.nan

    @property
    def equivalent(self) -> bool:
        return self.equivalence_p < 1 - CONFIDENCE


def paired_difference(
    cell: Mapping[int, float], baseline: Mapping[int, float], margin: float | None = None
) -> Comparison:
    """Compares a cell with the baseline seed by seed (same seed = same data order and init noise).

    Args:
        cell: seed -> value.
        baseline: seed -> value.
        margin: equivalence margin (in the metric's units); None: no equivalence test.
    """
    seeds = sorted(set(cell) & set(baseline))
    margin_value = math.nan if margin is None else float(margin)
    if not seeds:
        return Comparison(0, math.nan, math.nan, margin=margin_value)
    d = np.array([cell[s] - baseline[s] for s in seeds], dtype=float)
    n, diff = len(seeds), float(d.mean())
    if n < 2:
        return Comparison(n, diff, math.nan, margin=margin_value)
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    t_crit = float(stats.t.ppf((1 + CONFIDENCE) / 2, n - 1))
    mde = (t_crit + float(stats.t.ppf(POWER, n - 1))) * se
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant differences: p is nan, shown n/a
        p = float(stats.ttest_1samp(d, 0.0).pvalue)  # = scipy.stats.ttest_rel(cell, baseline)
    equivalence_p = math.nan
    if margin is not None and se > 0:
        lower = 1 - float(stats.t.cdf((diff + margin_value) / se, n - 1))  # H0: diff <= -margin
        upper = float(stats.t.cdf((diff - margin_value) / se, n - 1))  # H0: diff >= +margin
        equivalence_p = max(lower, upper)
    return Comparison(n, diff, p, diff - t_crit * se, diff + t_crit * se, mde, margin_value, equivalence_p)
