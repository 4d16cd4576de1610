"""The report's figures (PNG, matplotlib's Agg backend: no display needed)."""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from contract.files import write_atomic
from experiments.analysis.formatting import count_text

Curve = Mapping[int, float]  # step -> value


def _save(fig, path: Path) -> None:
    """The PNG written whole or not at all: two sweeps sharing a folder may report at once, and the
    TensorBoard summary reads these files back."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    write_atomic(path, buffer.getvalue())


def _finish(fig, ax, path: Path, drawn: bool, xlabel: str, ylabel: str, title: str) -> bool:
    """Labels, grid and legend, then the PNG when anything was drawn; closes the figure. Returns `drawn`."""
    if drawn:
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        _save(fig, path)
    plt.close(fig)
    return drawn


def seed_band(curves: Sequence[Curve]) -> dict[int, tuple[float, float, float]]:
    """step -> (mean, min, max) over the runs' finite values at that step.

    A resumed run may lack a point (a validation skipped on restore): each step averages what exists.
    """
    steps = sorted({s for c in curves for s in c if math.isfinite(c[s])})
    values = {s: [c[s] for c in curves if s in c and math.isfinite(c[s])] for s in steps}
    return {s: (sum(v) / len(v), min(v), max(v)) for s, v in values.items()}


def learning_curves(runs_by_cell: Mapping[str, Sequence[Curve]], metric: str, path: Path) -> bool:
    """One line per cell: the mean over its runs at each step, and a band from their min to max.

    Args:
        runs_by_cell: cell -> one curve per finished run.
        metric: the tag plotted (axis label).
        path: the PNG to write.

    Returns:
        Whether there was anything to plot (no file otherwise).
    """
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = False
    for cell, curves in runs_by_cell.items():
        band = seed_band(curves)
        if not band:
            continue
        steps = list(band)
        mean, low, high = zip(*band.values())
        (line,) = ax.plot(steps, mean, label=f"{cell} (n={len(curves)})", marker="." if len(steps) < 30 else None)
        if len(curves) > 1:
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
        drawn = True
    return _finish(fig, ax, path, drawn, "step", metric, f"{metric}: mean over seeds, band = min–max")


# what an evaluation "length" of a `val/loss@N` metric is: tokens, or an image's side in pixels (ViT)
EVALUATION_AXES = {
    "tokens": ("evaluation length (tokens)", "Length extrapolation: final val/loss at each evaluation length"),
    "pixels": ("evaluation image size (pixels a side)", "Resolution change: final val/loss at each image size"),
}


def length_curves(loss_by_cell: Mapping[str, Mapping[int, Sequence[float]]], path: Path, unit: str = "tokens") -> bool:
    """Validation loss against evaluation length, one line per cell (length extrapolation), or against
    the evaluated image size (`unit="pixels"`): the mean over seeds, with a min–max band over them.

    Args:
        loss_by_cell: cell -> {evaluation length: final loss of each seed}; a length where a seed has no
            finite value (e.g. `learned` positions past their table) is left out.
        path: the PNG to write.
        unit: a key of `EVALUATION_AXES`.

    Returns:
        Whether there was anything to plot.
    """
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = False
    for cell, by_length in loss_by_cell.items():
        points = sorted(
            (length, list(values)) for length, values in by_length.items()
            if values and all(math.isfinite(v) for v in values)
        )  # fmt: skip
        if not points:
            continue
        xs = [length for length, _ in points]
        (line,) = ax.plot(xs, [sum(v) / len(v) for _, v in points], marker="o", label=cell)
        if any(len(v) > 1 for _, v in points):
            ax.fill_between(xs, [min(v) for _, v in points], [max(v) for _, v in points],
                            color=line.get_color(), alpha=0.2)  # fmt: skip
        drawn = True
    if drawn:
        ax.set_xscale("log", base=2)
        lengths = sorted({length for losses in loss_by_cell.values() for length in losses})
        ax.set_xticks(lengths, [str(length) for length in lengths])
    xlabel, title = EVALUATION_AXES[unit]
    return _finish(fig, ax, path, drawn, xlabel, "val/loss", title)


def sensitivity_curves(
    curves: Mapping[str, Mapping[float, Sequence[float]]], chosen: Mapping[str, float], key: str, metric: str,
    path: Path,
) -> bool:  # fmt: skip
    """A tuned sweep's search: one line per cell, the mean over tune seeds at each searched value (log x),
    a min–max band, and the value the cell chose marked. Diverged points (nan) are left out.

    Returns:
        Whether there was anything to plot (no file otherwise).
    """
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = False
    for cell, by_value in curves.items():
        band = {x: [v for v in values if math.isfinite(v)] for x, values in by_value.items()}
        band = {x: v for x, v in band.items() if v and len(v) == len(by_value[x])}
        if not band:
            continue
        xs = list(band)
        mean = [sum(v) / len(v) for v in band.values()]
        (line,) = ax.plot(xs, mean, marker=".", label=cell)
        if any(len(v) > 1 for v in band.values()):
            ax.fill_between(xs, [min(v) for v in band.values()], [max(v) for v in band.values()],
                            color=line.get_color(), alpha=0.2)  # fmt: skip
        if chosen.get(cell) in band:
            ax.plot([chosen[cell]], [mean[xs.index(chosen[cell])]], "o", color=line.get_color(), markersize=9)
        drawn = True
    ax.set_xscale("log")
    title = f"Sensitivity: {metric} against {key} (● the value each cell chose)"
    return _finish(fig, ax, path, drawn, key, metric, title)


def ladder_curves(
    points: Mapping[str, Mapping[float, Sequence[float]]], fits: Mapping[str, Callable[[Any], Any] | None],
    xlabel: str, metric: str, path: Path,
) -> bool:  # fmt: skip
    """A model ladder: each cell's final metric against model size (log-log), the seed mean with a min–max
    band, and its fitted curve (dashed) over the sizes it was fitted on.

    Args:
        points: cell -> {size: the final metric of each seed}.
        fits: cell -> the fitted law (callable on sizes), or None where the fit failed.
    """
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = False
    for cell, by_size in points.items():
        sizes = sorted(n for n, v in by_size.items() if v and math.isfinite(n))
        if not sizes:
            continue
        values = [list(by_size[n]) for n in sizes]
        (line,) = ax.plot(sizes, [sum(v) / len(v) for v in values], "o", label=cell)
        if any(len(v) > 1 for v in values):
            low, high = [min(v) for v in values], [max(v) for v in values]
            ax.fill_between(sizes, low, high, color=line.get_color(), alpha=0.2)
        law = fits.get(cell)
        if law is not None and len(sizes) > 1:
            grid = [sizes[0] * (sizes[-1] / sizes[0]) ** (i / 50) for i in range(51)]
            ax.plot(grid, [float(law(x)) for x in grid], "--", color=line.get_color())
        drawn = True
    ax.set_xscale("log")
    ax.set_yscale("log")
    return _finish(fig, ax, path, drawn, xlabel, metric, f"Ladder: {metric} against {xlabel} (dashed: E + A·N^−α)")


def budget_curves(
    points: Mapping[str, Mapping[float, Sequence[float]]], xlabel: str, metric: str, path: Path,
    reference: float | None = None,
) -> bool:  # fmt: skip
    """A sweep's horizons: each cell's final metric against its training budget (log x), the seed mean joined across
    horizons with a min–max band over seeds.

    Args:
        points: cell -> {budget (tokens, FLOPs): the final metric of each seed at that horizon}.
        reference: a level to draw across (0 for differences).
    """
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if reference is not None:
        ax.axhline(reference, color="grey", linewidth=1, linestyle="--")
    drawn, ticks = False, set()
    for cell, by_budget in points.items():
        budgets = sorted(x for x, v in by_budget.items() if v and math.isfinite(x) and x > 0)
        if not budgets:
            continue
        ticks.update(budgets)
        values = [list(by_budget[x]) for x in budgets]
        (line,) = ax.plot(budgets, [sum(v) / len(v) for v in values], "o-", label=cell)
        if any(len(v) > 1 for v in values):
            ax.fill_between(budgets, [min(v) for v in values], [max(v) for v in values], color=line.get_color(),
                            alpha=0.2)  # fmt: skip
        drawn = True
    ax.set_xscale("log")
    ax.set_xticks(sorted(ticks), [count_text(x) for x in sorted(ticks)])  # the horizons themselves, not powers of ten
    ax.minorticks_off()
    return _finish(fig, ax, path, drawn, xlabel, metric, f"Horizons: final {metric} against {xlabel}")
