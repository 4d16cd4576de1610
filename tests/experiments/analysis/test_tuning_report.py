"""The tuning section's numbers (`experiments.analysis.tuning_report`) on a hand-made search."""

from __future__ import annotations

import math

import pytest

from experiments.analysis.tuning_report import CellSearch, sensitivity

GRID = [(1e-3,), (3e-3,), (1e-2,)]


def test_sensitivity_is_the_mean_capped_excess_over_the_best():
    """Wortsman et al.: mean over the grid of min(loss, cap) − best; a diverged point counts as the cap."""
    search = CellSearch("a", {(1e-3,): [2.0], (3e-3,): [1.5], (1e-2,): [math.nan], (3e-2,): [1.4]})
    expected = ((2.0 - 1.4) + (1.5 - 1.4) + (3.0 - 1.4)) / 3  # the best (1.4) lies outside the initial grid
    assert sensitivity(search, GRID, cap=3.0, higher=False) == pytest.approx(expected)
    flat = CellSearch("b", {p: [1.0] for p in GRID})
    assert sensitivity(flat, GRID, cap=3.0, higher=False) == 0.0


def test_sensitivity_for_a_metric_where_higher_is_better():
    search = CellSearch("a", {(1e-3,): [0.5], (3e-3,): [0.9], (1e-2,): [0.7]})
    assert sensitivity(search, GRID, cap=0.5, higher=True) == pytest.approx((0.4 + 0.0 + 0.2) / 3)


def test_a_chosen_value_at_an_end_of_what_was_searched_is_unbracketed():
    points = {(1e-3, 10.0): [1.0], (3e-3, 10.0): [0.9], (3e-3, 100.0): [0.8]}
    assert CellSearch("a", points, chosen=(3e-3, 100.0)).unbracketed(["lr", "scale"]) == ["lr", "scale"]
    assert CellSearch("a", points | {(1e-2, 100.0): [1.0]}, chosen=(3e-3, 100.0)).unbracketed(["lr", "scale"]) == [
        "scale"
    ]
    assert CellSearch("a", points).unbracketed(["lr", "scale"]) == []  # not chosen yet
