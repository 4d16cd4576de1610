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
from pathlib import Path
from typing import Any

import numpy as np

from contract.metrics import higher_is_better
from experiments.analysis import plots
from experiments.analysis.comparison import Analysis, CellResult
from experiments.analysis.formatting import p_text
from experiments.analysis.ladder_fit import LadderFit, crossing, fit_ladder
from experiments.analysis.stats import paired_difference

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


def _fits(sizes, metric: str, axis: int) -> tuple[dict[str, dict[float, list[float]]], dict[str, LadderFit | None]]:
    points = {
        cell: {by[axis]: list(by[0].values(metric).values()) for by in rungs.values() if math.isfinite(by[axis])}
        for cell, rungs in sizes.items()
    }
    return points, {cell: fit_ladder(p) if len(p) else None for cell, p in points.items()}


def _interval(low: float, high: float) -> str:
    return f"[{low:.3g}, {high:.3g}]"


def ladder_section(out_dir: Path, analysis: Analysis, info: dict[str, Any]) -> tuple[str, list[tuple[str, Path]]]:
    """The report's `## Ladder` section and its figures (caption, path relative to `out_dir`): the main metric,
    then each of the spec's `ladder_metrics` (e.g. the loss at 4x the training length) the same way."""
    if analysis.main is None:
        return "## Ladder\n\nNo validation metric logged yet.", []
    extra = [m for m in info.get("ladder_metrics", []) if m != analysis.main]
    parts, figures = ["## Ladder"], []
    for metric in [analysis.main, *extra]:
        if metric not in analysis.metrics:
            parts.append(f"### `{metric}`\n\nNot logged by any run yet.")
            continue
        text, found = _metric_ladder(out_dir, analysis, info, metric, suffix="" if metric == analysis.main else
                                     "_" + re.sub(r"[^A-Za-z0-9]+", "_", metric).strip("_"))  # fmt: skip
        parts.append(text if metric == analysis.main and not extra else f"### `{metric}`\n\n{text}")
        figures += found
    return "\n\n".join(parts), figures


def _metric_ladder(
    out_dir: Path, analysis: Analysis, info: dict[str, Any], metric: str, suffix: str
) -> tuple[str, list[tuple[str, Path]]]:
    names = [s["name"] for s in info["ladder"]["sizes"]]
    sizes = _sizes(analysis, info)
    baseline = info["ladder"]["cells"].get(analysis.baseline or "", [None])[0]
    sign = -1.0 if higher_is_better(metric) else 1.0
    lines = [f"Each cell at every size; `{metric}` (mean ± std over seeds) with the size's non-embedding "
             "parameters. Fits: L = E + A·N^−α on the seed means, 95% CIs from a bootstrap over seeds."]  # fmt: skip
    head = ["cell", *names, "E", "α", "fit notes"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    points, fits = _fits(sizes, metric, 1)
    for cell, rungs in sizes.items():
        shown = []
        for name in names:
            result, n, _ = rungs.get(name, (None, math.nan, math.nan))
            values = list(result.values(metric).values()) if result else []
            spread = f" ± {np.std(values, ddof=1):.3f}" if len(values) > 1 else ""
            shown.append(f"{np.mean(values):.3f}{spread} ({n:,.0f})" if values else "—")
        f = fits[cell]
        e = f"{f.point.e:.3f}" + (f" {_interval(*f.ci['e'])}" if f.ci else "") if f else "—"
        alpha = f"{f.point.alpha:.3f}" + (f" {_interval(*f.ci['alpha'])}" if f.ci else "") if f else "—"
        notes = "; ".join(f.warnings) if f else "no fit (fewer sizes than parameters, or it failed)"
        rows.append("| " + " | ".join([f"`{cell}`", *shown, e, alpha, notes]) + " |")
    lines.append("\n".join(rows))

    # the ranking at each size, and each cell minus the baseline cell there, paired by seed
    rank_rows = ["| size | ranking (best first) | " + (f"− `{baseline}` [95% CI], p" if baseline else "") + " |",
                 "|---|---|---|"]  # fmt: skip
    for name in names:
        here = {cell: rungs[name][0] for cell, rungs in sizes.items() if name in rungs}
        means = {c: np.mean(list(r.values(metric).values())) for c, r in here.items() if r.values(metric)}
        ranking = " > ".join(f"`{c}`" for c in sorted(means, key=lambda c: sign * means[c]))
        diffs = []
        if baseline in here:
            for cell, result in here.items():
                if cell != baseline:
                    d = paired_difference(result.values(metric), here[baseline].values(metric))
                    ci = f" [{d.ci_low:+.3f}, {d.ci_high:+.3f}]" if math.isfinite(d.ci_low) else " (one seed: no CI)"
                    diffs.append(f"`{cell}` {d.diff:+.3f}{ci}, p = {p_text(d.p_value)}")
        rank_rows.append(f"| {name} | {ranking} | {'; '.join(diffs)} |")
    lines += [f"Ranking by `{metric}` at each size:", "\n".join(rank_rows)]

    if baseline in fits and fits[baseline]:
        text = []
        for cell, f in fits.items():
            if cell == baseline or f is None:
                continue
            c = crossing(f, fits[baseline])
            low, high = max(f.point.n_min, fits[baseline].point.n_min), min(f.point.n_max, fits[baseline].point.n_max)
            where = (
                f"cross at N ≈ {c.n:,.0f}" + (f" (95% CI {_interval(*c.ci)})" if c.ci else "")
                if c.n else f"no crossing within the ladder (N {low:,.0f} – {high:,.0f})"
            )
            share = f"; {c.fraction:.0%} of bootstrap pairs cross there" if math.isfinite(c.fraction) else ""
            text.append(f"- `{cell}` and `{baseline}`: {where}{share}.")
        lines += ["Crossings of the fitted curves (within the ladder's sizes only; beyond them a fit is an "
                  "extrapolation):", "\n".join(text) or "- (one cell)"]  # fmt: skip

    figures = []
    for axis, key in ((1, "params"), (2, "flops")):
        axis_points, axis_fits = (points, fits) if axis == 1 else _fits(sizes, metric, axis)
        path = Path("plots") / f"ladder_{key}{suffix}.png"
        laws = {cell: (f.point if f else None) for cell, f in axis_fits.items()}
        if plots.ladder_curves(axis_points, laws, AXES[key], metric, out_dir / path):
            figures.append((f"{metric} against {AXES[key]} (ladder; band: min–max over seeds; dashed: fit)", path))
    return "\n\n".join(lines), figures
