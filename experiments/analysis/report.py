"""`python cli.py report DIR`: the comparison table of a sweep, from its ledger and event files.

Writes `DIR/report.md` (tables and plots), `DIR/report.csv` (the same numbers, one row per
metric and cell), `DIR/plots/*.png` and the TensorBoard summary in `DIR/_summary/`. Only runs
that finished (`done`) enter the statistics; diverged and failed runs are counted and shown.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
from pathlib import Path
from typing import Any

from experiments.analysis import plots
from experiments.analysis.comparison import Analysis, CellResult, analyse
from experiments.analysis.events import read_scalars
from experiments.analysis.stats import CONFIDENCE, PAIRED_TEST
from experiments.analysis.tb_summary import write_summary
from experiments.sweep.ledger import LEDGER_NAME, Ledger
from lit_modules.metrics import higher_is_better

SWEEP_INFO = "sweep.json"
CSV_COLUMNS = (
    "metric", "higher_is_better", "cell", "rank", "best", "runs", "done", "diverged", "failed", "n", "mean", "std",
    "ci_low", "ci_high", "diff_vs_baseline", "n_pairs", "p_value", "params", "params_non_embedding", "flops_per_token",
)  # fmt: skip


def _f(value: float, digits: int = 4) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:.{digits}f}"


def _p(value: float) -> str:
    return "n/a" if not math.isfinite(value) else (f"{value:.3g}" if value >= 1e-4 else f"{value:.1e}")


def _count(value: float) -> str:
    if not math.isfinite(value):
        return "n/a"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.0f}"


def _row(analysis: Analysis, metric: str, rank: int, cell: CellResult) -> list[str]:
    s = cell.summaries[metric]
    mean = "n/a" if not s.n else f"{_f(s.mean)} ± {_f(s.std)}" if s.n > 1 else _f(s.mean)
    ci = f"[{_f(s.ci_low)}, {_f(s.ci_high)}]" if s.n > 1 else "n/a"
    if cell.name == analysis.baseline:
        diff, p = "baseline", ""
    else:
        c = cell.comparisons.get(metric)
        diff = f"{c.diff:+.4f} (n={c.n})" if c and c.n and math.isfinite(c.diff) else "n/a"
        p = _p(c.p_value) if c else "n/a"
    mark = "★" if cell.name == analysis.best(metric) else ""
    row = [f"{rank} {mark}".strip() if metric == analysis.main else mark]
    row += [f"`{cell.name}`", cell.runs_text(), mean, str(s.n), ci, diff, p]
    if metric == analysis.main:
        params = cell.stat("params")
        row += [f"{params:,.0f}" if math.isfinite(params) else "n/a", _count(cell.stat("flops_per_token"))]
    return row


def metric_table(analysis: Analysis, metric: str) -> str:
    """A Markdown table of one metric: every cell's mean ± std, n, CI and difference from the
    baseline; the main metric's table also ranks the cells and gives parameters and FLOPs."""
    main = metric == analysis.main
    head = ["rank" if main else "", "cell", "runs", "mean ± std", "n", f"{CONFIDENCE:.0%} CI", "Δ vs baseline", "p"]
    head += ["params", "FLOPs/token"] if main else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += [
        "| " + " | ".join(_row(analysis, metric, rank, cell)) + " |" for rank, cell in enumerate(analysis.cells, 1)
    ]
    return "\n".join(lines)


def tables_markdown(analysis: Analysis) -> str:
    """Every metric's table, the main metric first."""
    metrics = ([analysis.main] if analysis.main else []) + [m for m in analysis.metrics if m != analysis.main]
    parts = []
    for metric in metrics:
        direction = "higher is better" if higher_is_better(metric) else "lower is better"
        title = f"### {metric} ({direction}){' — main metric' if metric == analysis.main else ''}"
        parts.append(f"{title}\n\n{metric_table(analysis, metric)}")
    return "\n\n".join(parts)


def _plot_name(tag: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", tag).strip("_") + ".png"


def make_plots(out_dir: Path, analysis: Analysis) -> list[tuple[str, Path]]:
    """Learning curves (main metric and train/loss) and, for causal LMs, loss against evaluation length.

    Returns:
        (caption, path relative to `out_dir`) of each figure written.
    """
    figures = []
    tags = [t for t in (analysis.main, "train/loss") if t]
    done_runs = {
        c.name: [out_dir / c.name / f"seed{r['seed']}" for r in c.rows if r["status"] == "done"] for c in analysis.cells
    }
    scalars = {cell: [read_scalars(d) for d in dirs] for cell, dirs in done_runs.items()}
    for tag in tags:
        curves = {cell: [s.curves[tag] for s in runs if tag in s.curves] for cell, runs in scalars.items()}
        path = Path("plots") / _plot_name(tag)
        if plots.learning_curves({c: v for c, v in curves.items() if v}, tag, out_dir / path):
            figures.append((f"{tag} against training step (mean over seeds, band: min–max)", path))
    lengths = {int(m.split("@")[1]): m for m in analysis.metrics if re.fullmatch(r"val/loss@\d+", m)}
    if lengths:
        by_cell = {c.name: {L: c.summaries[m].mean for L, m in lengths.items()} for c in analysis.cells}
        path = Path("plots") / "length_extrapolation.png"
        if plots.length_curves(by_cell, out_dir / path):
            figures.append(("final val/loss against evaluation length (length extrapolation; log2 axis)", path))
    return figures


def _num(value: float) -> str:
    return repr(value) if math.isfinite(value) else ""


def csv_rows(analysis: Analysis, axis_values: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (metric, cell): the numbers of the tables in full precision, n/a as empty."""
    rows = []
    for metric in analysis.metrics:
        best = analysis.best(metric)
        for rank, cell in enumerate(analysis.cells, 1):
            s, c = cell.summaries[metric], cell.comparisons.get(metric)
            row: dict[str, Any] = {"metric": metric, "higher_is_better": higher_is_better(metric), "cell": cell.name}
            row |= axis_values.get(cell.name, {})
            row |= {"rank": rank if metric == analysis.main else "", "best": cell.name == best, "runs": len(cell.rows)}
            row |= {status: cell.count(status) for status in ("done", "diverged", "failed")}
            row |= {
                "n": s.n,
                "mean": _num(s.mean),
                "std": _num(s.std),
                "ci_low": _num(s.ci_low),
                "ci_high": _num(s.ci_high),
            }
            if c is not None:
                row |= {"diff_vs_baseline": _num(c.diff), "n_pairs": c.n, "p_value": _num(c.p_value)}
            counts = {k: cell.stat(k) for k in ("params", "params_non_embedding", "flops_per_token")}
            row |= {k: f"{v:.0f}" if math.isfinite(v) else "" for k, v in counts.items()}
            rows.append(row)
    return rows


def write_csv(path: Path, analysis: Analysis, axis_values: dict[str, dict[str, Any]]) -> None:
    """Writes `report.csv` (see `csv_rows`)."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*CSV_COLUMNS[:3], *analysis.axes, *CSV_COLUMNS[3:]], restval="")
        writer.writeheader()
        writer.writerows(csv_rows(analysis, axis_values))


def header_markdown(out_dir: Path, info: dict[str, Any], ledger: Ledger, analysis: Analysis) -> str:
    """The report's opening: what was run, how many runs ended how, how to read the tables, warnings."""
    statuses = [r["status"] for r in ledger.rows.values()]
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in ("done", "diverged", "failed") if statuses.count(s))
    header = [
        f"# Sweep report: `{out_dir.name}`",
        "",
        f"- spec: `{info.get('spec', '?')}`; base: {', '.join(f'`{b}`' for b in info.get('base', [])) or '?'}",
        f"- fixed: `{json.dumps(info.get('fixed', {}))}`; seeds: {info.get('seeds', '?')}",
        f"- runs: {len(statuses)} ({counts or 'none'}); baseline: `{analysis.baseline or 'none'}`",
        (
            "- statistics over `done` runs only (diverged and failed runs are counted in *runs*, not averaged): "
            f"mean ± sample std, n, {CONFIDENCE:.0%} CI from Student's t; Δ = cell − baseline, paired by seed, "
            f"p from a {PAIRED_TEST}; n/a below 2 values. ★ best (by mean) per metric."
        ),
    ]
    header += [f"\n> **Warning:** {w}" for w in analysis.warnings]
    return "\n".join(header)


def build_report(out_dir: Path) -> str:
    """Writes report.md, report.csv, the plots and the TensorBoard summary of the sweep in `out_dir`.

    Args:
        out_dir: a sweep folder (holding `results.csv`, and `sweep.json` when made by `cli.py sweep`).

    Returns:
        The main metric's table and the warnings, for printing.
    """
    info_path = out_dir / SWEEP_INFO
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    ledger = Ledger(out_dir / LEDGER_NAME)
    analysis = analyse(ledger, info)
    axis_values = {c.name: {a: c.rows[0].get(a, "") for a in analysis.axes} for c in analysis.cells}
    figures = make_plots(out_dir, analysis)
    header = header_markdown(out_dir, info, ledger, analysis)
    tables = tables_markdown(analysis)
    sections = [header, "## Results", tables]
    if figures:
        sections += ["## Plots"] + [f"### {caption}\n\n![{caption}]({path.as_posix()})" for caption, path in figures]
    markdown = "\n\n".join(sections)
    (out_dir / "report.md").write_text(markdown + "\n")
    write_csv(out_dir / "report.csv", analysis, axis_values)
    means = {
        c.name: {m: c.summaries[m].mean for m in analysis.metrics} | {"params": c.stat("params")}
        for c in analysis.cells
    }
    write_summary(out_dir, tables, axis_values, means)
    main_table = (
        f"{analysis.main}:\n\n{metric_table(analysis, analysis.main)}" if analysis.main else "(no val/* metric logged)"
    )
    return "\n".join([main_table, *(f"Warning: {w}" for w in analysis.warnings)])


def main(argv: list[str]) -> int:
    """`cli.py report DIR`; prints the main table. Returns the exit status."""
    parser = argparse.ArgumentParser(prog="cli.py report", description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="a sweep folder (holding results.csv)")
    args = parser.parse_args(argv)
    if not (args.dir / LEDGER_NAME).exists():
        print(f"error: {args.dir / LEDGER_NAME} not found", flush=True)
        return 2
    print(build_report(args.dir))
    print(f"\nReport: {args.dir / 'report.md'}")
    return 0
