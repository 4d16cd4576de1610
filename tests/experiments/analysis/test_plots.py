"""What the report's plots draw (`experiments.analysis.plots`), read from the axes before they are saved."""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiments.analysis import plots


@pytest.fixture
def drawn_axes(monkeypatch):
    """The axes each plot hands to `_finish` (which would save and close them)."""
    axes = []

    def keep(fig, ax, path, drawn, *labels):
        axes.append(ax)
        return drawn

    monkeypatch.setattr(plots, "_finish", keep)
    return axes


def test_length_curves_draw_the_seed_mean_with_a_min_max_band(drawn_axes, tmp_path):
    by_cell = {
        "alibi": {64: [1.70, 1.72, 1.74], 512: [1.68, 1.71, 1.71]},
        "learned": {64: [1.80, 1.90], 512: [math.nan, math.nan]},  # past its table: the length is left out
    }
    assert plots.length_curves(by_cell, tmp_path / "p.png")
    (ax,) = drawn_axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["alibi"].get_xdata()) == [64, 512]
    assert np.allclose(lines["alibi"].get_ydata(), [1.72, 1.70])
    assert list(lines["learned"].get_xdata()) == [64]
    bands = [c.get_paths()[0].vertices for c in ax.collections]
    assert len(bands) == 2  # one band per cell with more than one seed
    assert np.isclose(bands[0][:, 1].min(), 1.68) and np.isclose(bands[0][:, 1].max(), 1.74)


def test_length_curves_with_one_seed_draw_no_band_and_nothing_without_values(drawn_axes, tmp_path):
    assert plots.length_curves({"rope": {64: [1.7], 128: [1.8]}}, tmp_path / "p.png")
    assert not drawn_axes[0].collections
    assert not plots.length_curves({"learned": {512: [math.nan]}}, tmp_path / "q.png")


def test_budget_curves_mark_each_horizon_on_the_axis_and_draw_the_reference(drawn_axes, tmp_path):
    by_cell = {
        "wsd": {1.29e12: [2.01, 2.00], 2.57e12: [1.82, 1.83], 5.14e12: [1.70, 1.69]},
        "gain": {1.29e12: [0.3], 2.57e12: [], 5.14e12: [0.0]},  # a horizon without runs is left out
    }
    assert plots.budget_curves(by_cell, "training FLOPs", "test/loss", tmp_path / "p.png", reference=0.0)
    (ax,) = drawn_axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1.29T", "2.57T", "5.14T"]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["gain"].get_xdata()) == [1.29e12, 5.14e12]
    assert [list(line.get_ydata()) for line in ax.get_lines() if line.get_linestyle() == "--"] == [[0.0, 0.0]]
