"""The ladder's scaling fits (`experiments.analysis.ladder_fit`) recover planted laws and crossings from
synthetic ladders: known E, A, α plus seed noise, no training."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.analysis.ladder_fit import crossing, fit, fit_ladder, law

SIZES = [1e4, 3e4, 1e5, 3e5, 1e6]


def ladder(e, a, alpha, noise=0.004, seeds=3, rng=0):
    gen = np.random.default_rng(rng)
    return {n: list(law(np.full(seeds, n), e, a, alpha) + gen.normal(0, noise, seeds)) for n in SIZES}


def test_a_noiseless_law_is_recovered_exactly():
    loss = law(np.array(SIZES), 1.5, 20.0, 0.35)
    found = fit(SIZES, loss)
    assert found.e == pytest.approx(1.5, rel=1e-4) and found.alpha == pytest.approx(0.35, rel=1e-4)
    assert found.a == pytest.approx(20.0, rel=1e-3) and found.rms < 1e-8


def test_a_noisy_ladder_recovers_its_law():
    result = fit_ladder(ladder(1.5, 20.0, 0.35), resamples=100)
    assert result.point.e == pytest.approx(1.5, abs=0.05) and result.point.alpha == pytest.approx(0.35, abs=0.08)
    assert all(low <= getattr(result.point, name) <= high for name, (low, high) in result.ci.items())
    assert result.warnings == [w for w in result.warnings if "fewer than 5 seeds" in w]  # 3 seeds: narrow CIs


def test_with_five_seeds_the_bootstrap_intervals_cover_the_planted_law():
    """Coverage over 20 synthetic ladders (each its own noise): a 95% interval should miss rarely."""
    covered = {"e": 0, "alpha": 0}
    for r in range(20):
        result = fit_ladder(ladder(1.5, 20.0, 0.35, seeds=5, rng=100 + r), seed=r, resamples=100)
        assert not result.warnings
        for name, true in (("e", 1.5), ("alpha", 0.35)):
            covered[name] += result.ci[name][0] <= true <= result.ci[name][1]
    assert covered["e"] >= 16 and covered["alpha"] >= 16


def test_too_few_sizes_and_a_bad_law_are_flagged():
    three = {n: v for n, v in ladder(1.5, 20.0, 0.35).items() if n in SIZES[:3]}
    assert "3 sizes for 3 parameters" in fit_ladder(three, resamples=20).warnings[0]
    assert fit(SIZES[:2], [2.0, 1.9]) is None  # fewer sizes than parameters: no fit
    zigzag = {n: [v] for n, v in zip(SIZES, [2.0, 1.6, 1.9, 1.5, 1.8])}
    assert any("large residuals" in w for w in fit_ladder(zigzag, resamples=20).warnings)


def test_a_planted_crossing_is_found_with_its_interval():
    # the first is better when small (lower A), worse when large (higher E): they meet near N = 1e5
    first, second = (1.6, 5.0, 0.3), (1.4, 11.3, 0.3)
    grid = np.geomspace(SIZES[0], SIZES[-1], 10000)
    true = grid[np.argmin(np.abs(law(grid, *first) - law(grid, *second)))]
    assert SIZES[0] < true < SIZES[-1]
    a, b = fit_ladder(ladder(*first, rng=1), resamples=300), fit_ladder(ladder(*second, rng=2), resamples=300)
    found = crossing(a, b)
    assert found.n == pytest.approx(true, rel=0.5) and found.ci[0] <= true <= found.ci[1]
    assert found.fraction > 0.9


def test_parallel_curves_do_not_cross_within_the_ladder():
    a, b = fit_ladder(ladder(1.5, 20.0, 0.35), resamples=100), fit_ladder(ladder(1.7, 20.0, 0.35, rng=3), resamples=100)
    found = crossing(a, b)
    assert found.n is None and found.fraction < 0.05


def test_extrapolation_is_named():
    found = fit(SIZES, law(np.array(SIZES), 1.5, 20.0, 0.35))
    assert found.extrapolates(1e7) and not found.extrapolates(1e5)


def test_one_seed_per_size_gives_a_fit_without_intervals():
    result = fit_ladder({n: [float(law(np.array(n), 1.5, 20.0, 0.35))] for n in SIZES})
    assert result.point.e == pytest.approx(1.5, rel=1e-3) and result.ci == {} and not result.samples
    assert result.warnings == ["one seed per size: no confidence intervals"]
