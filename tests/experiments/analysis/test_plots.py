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
