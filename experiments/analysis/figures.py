"""Which figures a sweep's report draws, from the metrics its runs logged."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from contract.run_folder import DONE
from experiments.analysis import plots
from experiments.analysis.comparison import Analysis
from experiments.records.events import RunScalars, joined, read_scalars
from experiments.records.ledger import PARENT_COLUMN

# a family evaluated at several sizes logs `val/loss@<size>`: the size counts tokens (a language model's
# evaluation lengths) or pixels (an image classifier's resolutions, which also log `val/acc@<size>`)
SIZE_FIGURES = {
    "tokens": (
        "length_extrapolation.png",
        "final val/loss against evaluation length (length extrapolation; mean over seeds, band: min–max; log2 axis)",
    ),
    "pixels": (
        "resolution.png",
        "final val/loss against evaluated image size (mean over seeds, band: min–max; log2 axis)",
    ),
}


def _plot_name(tag: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", tag).strip("_") + ".png"


def run_scalars(out_dir: Path, row: dict[str, str], starts: Mapping[str, int] | None = None) -> RunScalars:
    """A ledger row's run's scalars; a `horizons:` branch's (a row with a parent and a start in `starts`) joined to
    its stable run's before its start, so its curves begin at step 0."""
    scalars = read_scalars(out_dir / row["cell"] / f"seed{row['seed']}")
    start, parent = (starts or {}).get(row["cell"]), row.get(PARENT_COLUMN)
    return joined(read_scalars(out_dir / parent), scalars, start) if parent and start is not None else scalars


def make_plots(out_dir: Path, analysis: Analysis, starts: Mapping[str, int] | None = None) -> list[tuple[str, Path]]:
    """Learning curves (main metric and train/loss) and, for causal LMs, loss against evaluation length.

    Args:
        out_dir: the sweep folder.
        analysis: its analysis.
        starts: with `horizons:`, each horizon cell's branch start (its curves begin with its stable run's).

    Returns:
        (caption, path relative to `out_dir`) of each figure written.
    """
    figures = []
    # curves over training: validation (a tuned sweep's test metric has one point, at the end)
    main = analysis.main.replace("test/", "val/", 1) if analysis.main else None
    tags = [t for t in (main, "train/loss") if t]
    scalars = {c.name: [run_scalars(out_dir, r, starts) for r in c.rows if r["status"] == DONE] for c in analysis.cells}
    for tag in tags:
        curves = {cell: [s.curves[tag] for s in runs if tag in s.curves] for cell, runs in scalars.items()}
        path = Path("plots") / _plot_name(tag)
        if plots.learning_curves({c: v for c, v in curves.items() if v}, tag, out_dir / path):
            figures.append((f"{tag} against training step (mean over seeds, band: min–max)", path))
    sizes = {int(size): m for m in analysis.metrics for base, _, size in [m.partition("@")] if base == "val/loss"
             and size.isdigit()}  # fmt: skip
    if sizes:
        unit = "pixels" if any(m.startswith("val/acc@") for m in analysis.metrics) else "tokens"  # image classifiers
        name, caption = SIZE_FIGURES[unit]
        by_cell = {c.name: {size: list(c.values(m).values()) for size, m in sizes.items()} for c in analysis.cells}
        if plots.length_curves(by_cell, out_dir / "plots" / name, unit=unit):
            figures.append((caption, Path("plots") / name))
    return figures
