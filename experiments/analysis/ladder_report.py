"""A ladder sweep's section of the report (`ladder:` in the spec, `experiments.sweep.ladder`): per cell, the
main metric against non-embedding parameters and training FLOPs with a fitted saturating power law
(`ladder_fit`), the ranking at each size with paired differences from the baseline cell, where each cell's
curve crosses the baseline's, and the log-log plots.

Sizes are the runs' own accounting (the ledger's `params_non_embedding`, `flops_per_token` and `steps`);
training FLOPs are 3 × forward FLOPs per token × tokens trained, the tokens being steps × `data.batch_size`
× `data.seq_len` of the cell's resolved config (one process; absent for data without a `seq_len`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from contract.metrics import higher_is_better
from experiments.analysis import plots
from experiments.analysis.comparison import Analysis, CellResult
from experiments.analysis.formatting import p_text
from experiments.analysis.ladder_fit import Crossing, LadderFit, crossing, fit_ladder, fit_means
from experiments.analysis.stats import Comparison, paired_difference

AXES = {"params": "non-embedding parameters", "flops": "training FLOPs"}


def _training_flops(cell: CellResult, resolved: dict[str, Any]) -> float:
    data = (resolved.get("data") or {}).get("init_args") or {}
    tokens_per_step = data.get("batch_size", math.nan) * data.get("seq_len", math.nan)
    return 3.0 * cell.stat("flops_per_token") * cell.stat("steps") * tokens_per_step


def _sizes(analysis: Analysis, info: dict[str, Any]) -> dict[str, dict[str, tuple[CellResult, float, float]]]:
    """cell -> size name -> (its ladder cell's result, non-embedding parameters, training FLOPs)."""
    where = info["ladder"]["cells"]
    resolved = {c["name"]: c.get("resolved") or {} for c in info.get("cells", [])}
    out: dict[str, dict[str, tuple[CellResult, float, float]]] = {}
    for result in analysis.cells:
        if result.name in where:
            cell, size = where[result.name]
            flops = _training_flops(result, resolved.get(result.name, {}))
            out.setdefault(cell, {})[size] = (result, result.stat("params_non_embedding"), flops)
    return out


def _points(sizes, metric: str, axis: int) -> dict[str, dict[float, list[float]]]:
    """cell -> size on `axis` (1: parameters, 2: FLOPs) -> the metric of each seed there."""
    return {
        cell: {by[axis]: list(by[0].values(metric).values()) for by in rungs.values() if math.isfinite(by[axis])}
        for cell, rungs in sizes.items()
    }


def _fit_all(points: dict[str, dict[float, list[float]]]) -> dict[str, LadderFit | None]:
    return {cell: fit_ladder(p) if len(p) else None for cell, p in points.items()}


def _interval(low: float, high: float) -> str:
    return f"[{low:.3g}, {high:.3g}]"


class SeedValues:
    """The mean and sample std over seeds of a result's `values` (seed -> value), nan where too few."""

    values: dict[int, float]

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.values.values()))) if self.values else math.nan

    @property
    def std(self) -> float:
        return float(np.std(list(self.values.values()), ddof=1)) if len(self.values) > 1 else math.nan


@dataclass(frozen=True)
class SizeResult(SeedValues):
    """One cell at one size: the metric of each done run (seed -> value) and the size's own accounting."""

    values: dict[int, float]
    params: float  # non-embedding parameters
    flops: float  # training FLOPs


@dataclass(frozen=True)
class LadderRow:
    """One cell across the ladder: its result at each size it has, and its fit against parameters."""

    cell: str
    sizes: dict[str, SizeResult]
    fit: LadderFit | None


@dataclass(frozen=True)
class SizeRanking:
    """The cells at one size, best first, and each one's paired difference from the baseline cell there."""

    size: str
    ranking: tuple[str, ...]
    differences: dict[str, Comparison]


@dataclass(frozen=True)
class LadderTable:
    """A ladder's results for one metric, as the report's `## Ladder` section shows them.

    Args:
        metric: the metric (the main one, or one of the spec's `ladder_metrics`).
        sizes: the ladder's size names, smallest first.
        baseline: the baseline cell (before the ladder: compared at every size); None without one.
        rows: each cell's results and fit.
        rankings: each size's ranking and differences from the baseline.
        crossings: where each cell's fitted curve crosses the baseline's (cells with a fit, when the baseline has one).
    """

    metric: str
    sizes: tuple[str, ...]
    baseline: str | None
    rows: tuple[LadderRow, ...]
    rankings: tuple[SizeRanking, ...]
    crossings: dict[str, Crossing]
    # size -> (decision accuracy, 95% CI low, high) against the largest size; sizes with two cells or more
    decision_accuracy: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    def row(self, cell: str) -> LadderRow:
        return next(r for r in self.rows if r.cell == cell)


def ladder_table(analysis: Analysis, info: dict[str, Any], metric: str) -> LadderTable:
    """A ladder sweep's results for `metric` (see `LadderTable`), from its analysis and `sweep.json` (`info`)."""
    names = tuple(s["name"] for s in info["ladder"]["sizes"])
    sizes = _sizes(analysis, info)
    baseline = info["ladder"]["cells"].get(analysis.baseline or "", [None])[0]
    sign = -1.0 if higher_is_better(metric) else 1.0
    fits = _fit_all(_points(sizes, metric, 1))
    rows = tuple(
        LadderRow(cell, {name: SizeResult(r.values(metric), n, f) for name, (r, n, f) in rungs.items()}, fits[cell])
        for cell, rungs in sizes.items()
    )
    rankings = []
    for name in names:
        here = {cell: rungs[name][0] for cell, rungs in sizes.items() if name in rungs}
        means = {c: np.mean(list(r.values(metric).values())) for c, r in here.items() if r.values(metric)}
        differences = {
            cell: paired_difference(result.values(metric), here[baseline].values(metric))
            for cell, result in here.items()
            if baseline in here and cell != baseline
        }
        rankings.append(SizeRanking(name, tuple(sorted(means, key=lambda c: sign * means[c])), differences))
    crossings = {}
    if fits.get(baseline):
        crossings = {c: crossing(f, fits[baseline]) for c, f in fits.items() if c != baseline and f is not None}
    return LadderTable(metric, names, baseline, rows, tuple(rankings), crossings, decision_accuracy(rows, names, sign))


def decision_accuracy(
    rows: tuple[LadderRow, ...], sizes: tuple[str, ...], sign: float, draws: int = 2000
) -> dict[str, tuple[float, float, float]]:
    """DataDecide's decision accuracy (Magnusson et al. 2025): at each size below the largest, the fraction of
    cell pairs ranked there as at the largest size, and its 95% interval from a bootstrap over seeds (the same
    resampled seeds for every cell at a size, so paired runs stay paired; the largest size resampled too).

    Args:
        rows: each cell's results by size.
        sizes: the ladder's sizes, smallest first.
        sign: 1 where lower is better, -1 where higher is.
        draws: bootstrap resamples.
    """
    top, out = sizes[-1], {}
    rng = np.random.default_rng(0)  # a fixed stream: the report is a function of the ledger

    def means(size: str, cells: list[LadderRow], seeds: np.ndarray) -> np.ndarray:
        return np.array([np.mean([r.sizes[size].values[s] for s in seeds if s in r.sizes[size].values]) for r in cells])

    def agreement(small: np.ndarray, large: np.ndarray) -> float:
        i, j = np.triu_indices(len(small), k=1)
        return float(np.mean(np.sign(small[i] - small[j]) == np.sign(large[i] - large[j])))

    for size in sizes[:-1]:
        cells = [
            r for r in rows if r.sizes.get(size) and r.sizes[size].values and r.sizes.get(top) and r.sizes[top].values
        ]
        if len(cells) < 2:
            continue
        seeds = {k: np.array(sorted(set().union(*(r.sizes[k].values for r in cells)))) for k in (size, top)}
        point = agreement(sign * means(size, cells, seeds[size]), sign * means(top, cells, seeds[top]))
        boot = [
            agreement(*(sign * means(k, cells, rng.choice(seeds[k], len(seeds[k]))) for k in (size, top)))
            for _ in range(draws)
        ]
        out[size] = (point, float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975)))
    return out


def ladder_tables(analysis: Analysis, info: dict[str, Any]) -> list[LadderTable]:
    """The ladder's results for the main metric and each of the spec's `ladder_metrics` that a run logged."""
    if analysis.main is None:
        return []
    metrics = [analysis.main, *(m for m in info.get("ladder_metrics", []) if m != analysis.main)]
    return [ladder_table(analysis, info, m) for m in metrics if m in analysis.metrics]


def ladder_section(out_dir: Path, analysis: Analysis, info: dict[str, Any]) -> tuple[str, list[tuple[str, Path]]]:
    """The report's `## Ladder` section and its figures (caption, path relative to `out_dir`): the main metric,
    then each of the spec's `ladder_metrics` (e.g. the loss at 4x the training length) the same way."""
    if analysis.main is None:
        return "## Ladder\n\nNo validation metric logged yet.", []
    extra = [m for m in info.get("ladder_metrics", []) if m != analysis.main]
    tables = {t.metric: t for t in ladder_tables(analysis, info)}
    parts, figures = ["## Ladder"], []
    for metric in [analysis.main, *extra]:
        if metric not in tables:
            parts.append(f"### `{metric}`\n\nNot logged by any run yet.")
            continue
        suffix = "" if metric == analysis.main else "_" + re.sub(r"[^A-Za-z0-9]+", "_", metric).strip("_")
        text = _markdown(tables[metric])
        parts.append(text if metric == analysis.main and not extra else f"### `{metric}`\n\n{text}")
        figures += _figures(out_dir, tables[metric], _sizes(analysis, info), suffix)
    return "\n\n".join(parts), figures


def _ci(value: float, ci: dict[str, tuple[float, float]], key: str) -> str:
    return f"{value:.3f}" + (f" {_interval(*ci[key])}" if ci else "")


def _markdown(table: LadderTable) -> str:
    metric, baseline = table.metric, table.baseline
    lines = [f"Each cell at every size; `{metric}` (mean ± std over seeds) with the size's non-embedding "
             "parameters. Fits: L = E + A·N^−α on the seed means, 95% CIs from a bootstrap over seeds."]  # fmt: skip
    head = ["cell", *table.sizes, "E", "α", "fit notes"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in table.rows:
        shown = []
        for name in table.sizes:
            at = row.sizes.get(name)
            spread = f" ± {at.std:.3f}" if at and len(at.values) > 1 else ""
            shown.append(f"{at.mean:.3f}{spread} ({at.params:,.0f})" if at and at.values else "—")
        f = row.fit
        e, alpha = (_ci(f.point.e, f.ci, "e"), _ci(f.point.alpha, f.ci, "alpha")) if f else ("—", "—")
        notes = "; ".join(f.warnings) if f else "no fit (fewer sizes than parameters, or it failed)"
        rows.append("| " + " | ".join([f"`{row.cell}`", *shown, e, alpha, notes]) + " |")
    lines.append("\n".join(rows))

    rank_rows = ["| size | ranking (best first) | " + (f"− `{baseline}` [95% CI], p" if baseline else "") + " |",
                 "|---|---|---|"]  # fmt: skip
    for size in table.rankings:
        diffs = []
        for cell, d in size.differences.items():
            ci = f" [{d.ci_low:+.3f}, {d.ci_high:+.3f}]" if math.isfinite(d.ci_low) else " (one seed: no CI)"
            diffs.append(f"`{cell}` {d.diff:+.3f}{ci}, p = {p_text(d.p_value)}")
        ranking = " > ".join(f"`{c}`" for c in size.ranking)
        rank_rows.append(f"| {size.size} | {ranking} | {'; '.join(diffs)} |")
    lines += [f"Ranking by `{metric}` at each size:", "\n".join(rank_rows)]
    if table.decision_accuracy:
        shown = "; ".join(f"{size} {a:.2f} [{low:.2f}, {high:.2f}]" for size, (a, low, high) in
                          table.decision_accuracy.items())  # fmt: skip
        lines.append(f"Decision accuracy (DataDecide, Magnusson et al. 2025): the share of cell pairs ranked at each "
                     f"size as at {table.sizes[-1]}, 95% CI from a bootstrap over seeds: {shown}.")  # fmt: skip

    base_fit = table.row(baseline).fit if any(r.cell == baseline for r in table.rows) else None
    if base_fit:
        text = []
        for cell, c in table.crossings.items():
            f = table.row(cell).fit
            low, high = max(f.point.n_min, base_fit.point.n_min), min(f.point.n_max, base_fit.point.n_max)
            where = (
                f"cross at N ≈ {c.n:,.0f}" + (f" (95% CI {_interval(*c.ci)})" if c.ci else "")
                if c.n
                else f"no crossing within the ladder (N {low:,.0f} – {high:,.0f})"
            )
            share = f"; {c.fraction:.0%} of bootstrap pairs cross there" if math.isfinite(c.fraction) else ""
            text.append(f"- `{cell}` and `{baseline}`: {where}{share}.")
        lines += ["Crossings of the fitted curves (within the ladder's sizes only; beyond them a fit is an "
                  "extrapolation):", "\n".join(text) or "- (one cell)"]  # fmt: skip
    return "\n\n".join(lines)


def _figures(out_dir: Path, table: LadderTable, sizes, suffix: str) -> list[tuple[str, Path]]:
    """The log-log plots of `table`'s metric against parameters (with its fits) and against training FLOPs."""
    figures = []
    for axis, key in ((1, "params"), (2, "flops")):
        points = _points(sizes, table.metric, axis)
        if axis == 1:  # the table's fits, bootstrapped for their CIs; the FLOPs plot needs only each curve
            laws = {row.cell: (row.fit.point if row.fit else None) for row in table.rows}
        else:
            laws = {cell: fit_means(p) if len(p) else None for cell, p in points.items()}
        path = Path("plots") / f"ladder_{key}{suffix}.png"
        if plots.ladder_curves(points, laws, AXES[key], table.metric, out_dir / path):
            caption = f"{table.metric} against {AXES[key]} (ladder; band: min–max over seeds; dashed: fit)"
            figures.append((caption, path))
    return figures
