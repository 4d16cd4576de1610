"""`python cli.py report DIR`: the comparison table of a sweep, from its ledger and event files.

Writes `DIR/report.md` (tables and plots), `DIR/report.csv` (the same numbers, one row per
metric and cell), `DIR/plots/*.png` and the TensorBoard view `DIR/_summary/` (`tb_summary`). Only runs
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

from contract.metrics import higher_is_better
from contract.run_folder import DONE, ENDED
from experiments.analysis import plots
from experiments.analysis.comparison import Analysis, CellResult, analyse
from experiments.analysis.events import read_scalars
from experiments.analysis.stats import CONFIDENCE, EQUIVALENCE_TEST, PAIRED_TEST, POWER, Comparison
from experiments.analysis.tb_summary import write_summary
from experiments.sweep.ledger import LEDGER_NAME, Ledger
from experiments.sweep.spec import SUMMARY_DIR

SWEEP_INFO = "sweep.json"
CSV_COLUMNS = (
    "metric", "higher_is_better", "cell", "rank", "best", "runs", "done", "diverged", "failed", "n", "mean", "std",
    "ci_low", "ci_high", "diff_vs_baseline", "n_pairs", "p_value", "diff_ci_low", "diff_ci_high", "mde",
    "equivalence_margin", "equivalence_p", "params", "params_non_embedding", "flops_per_token",
)  # fmt: skip


def _has_trainable(analysis: Analysis) -> bool:
    """The ledger records trainable parameters (ledgers older than `params_trainable` do not: their reports
    keep their columns)."""
    return any(math.isfinite(cell.stat("params_trainable")) for cell in analysis.cells)


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


def _diff(c: Comparison | None) -> tuple[str, str, str]:
    """Δ with its interval, p, and the smallest detectable difference, as table cells."""
    if c is None or not c.n or not math.isfinite(c.diff):
        return "n/a", "n/a", "n/a"
    interval = f" [{c.ci_low:+.4f}, {c.ci_high:+.4f}]" if math.isfinite(c.ci_low) else ""
    return f"{c.diff:+.4f}{interval} (n={c.n})", _p(c.p_value), _f(c.mde)


def _equivalence(c: Comparison | None) -> str:
    if c is None or not math.isfinite(c.equivalence_p):
        return "n/a"
    return f"{_p(c.equivalence_p)} ({'equivalent' if c.equivalent else 'not shown'})"


def _row(analysis: Analysis, metric: str, rank: int, cell: CellResult) -> list[str]:
    s = cell.summaries[metric]
    mean = "n/a" if not s.n else f"{_f(s.mean)} ± {_f(s.std)}" if s.n > 1 else _f(s.mean)
    ci = f"[{_f(s.ci_low)}, {_f(s.ci_high)}]" if s.n > 1 else "n/a"
    margin = metric in analysis.margins
    if cell.name == analysis.baseline:
        compared = ["baseline", "", ""] + ([""] if margin else [])
    else:
        c = cell.comparisons.get(metric)
        compared = [*_diff(c)] + ([_equivalence(c)] if margin else [])
    mark = "★" if cell.name == analysis.best(metric) else ""
    row = [f"{rank} {mark}".strip() if metric == analysis.main else mark]
    row += [f"`{cell.name}`", cell.runs_text(), mean, str(s.n), ci, *compared]
    if metric == analysis.main:
        counts = ["params", "params_trainable"] if _has_trainable(analysis) else ["params"]
        row += [f"{cell.stat(k):,.0f}" if math.isfinite(cell.stat(k)) else "n/a" for k in counts]
        row.append(_count(cell.stat("flops_per_token")))
    return row


def _comparison_head(analysis: Analysis, metric: str) -> list[str]:
    head = [f"Δ [{CONFIDENCE:.0%} CI]", "p", f"MDE ({POWER:.0%})"]
    if metric in analysis.margins:
        head.append(f"TOST p (±{analysis.margins[metric]:g})")
    return head


def metric_table(analysis: Analysis, metric: str) -> str:
    """A Markdown table of one metric: every cell's mean ± std, n, CI and paired difference from the
    baseline (with its interval, p, the smallest detectable difference and, with a margin, the
    equivalence test); the main metric's table also ranks the cells and gives parameters and FLOPs."""
    main = metric == analysis.main
    head = ["rank" if main else "", "cell", "runs", "mean ± std", "n", f"{CONFIDENCE:.0%} CI"]
    head += _comparison_head(analysis, metric)
    head += (["params", "trainable"] if _has_trainable(analysis) else ["params"]) + ["FLOPs/token"] if main else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += [
        "| " + " | ".join(_row(analysis, metric, rank, cell)) + " |" for rank, cell in enumerate(analysis.cells, 1)
    ]
    return "\n".join(lines)


def group_tables(analysis: Analysis, metric: str) -> str:
    """The `compare_within` comparisons of one metric: each group's cells against the group's reference."""
    if not analysis.groups:
        return ""
    head = ["group", "cell", "vs", *_comparison_head(analysis, metric)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for group in analysis.groups:
        for name, by_metric in group.comparisons.items():
            c = by_metric.get(metric)
            extra = [_equivalence(c)] if metric in analysis.margins else []
            cells = [group.group, f"`{name}`", f"`{group.reference}`", *_diff(c), *extra]
            lines.append("| " + " | ".join(cells) + " |")
    axes = ", ".join(f"`{a}`" for a in analysis.groups[0].axes)
    title = f"Within groups of {axes} (each cell vs the group's cell with the baseline's other values):"
    return title + "\n\n" + "\n".join(lines)


def tables_markdown(analysis: Analysis) -> str:
    """Every metric's table, the main metric first."""
    metrics = ([analysis.main] if analysis.main else []) + [m for m in analysis.metrics if m != analysis.main]
    parts = []
    for metric in metrics:
        direction = "higher is better" if higher_is_better(metric) else "lower is better"
        title = f"### {metric} ({direction}){' — main metric' if metric == analysis.main else ''}"
        groups = group_tables(analysis, metric)
        parts.append(f"{title}\n\n{metric_table(analysis, metric)}" + (f"\n\n{groups}" if groups else ""))
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
        c.name: [out_dir / c.name / f"seed{r['seed']}" for r in c.rows if r["status"] == DONE] for c in analysis.cells
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
        if any(re.fullmatch(r"val/acc@\d+", m) for m in analysis.metrics):  # an image classifier's sizes
            path, caption = Path("plots") / "resolution.png", "final val/loss against evaluated image size (log2 axis)"
            drawn = plots.length_curves(by_cell, out_dir / path, unit="pixels")
        else:
            path = Path("plots") / "length_extrapolation.png"
            caption = "final val/loss against evaluation length (length extrapolation; log2 axis)"
            drawn = plots.length_curves(by_cell, out_dir / path)
        if drawn:
            figures.append((caption, path))
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
            row |= {status: cell.count(status) for status in ENDED}
            row |= {
                "n": s.n,
                "mean": _num(s.mean),
                "std": _num(s.std),
                "ci_low": _num(s.ci_low),
                "ci_high": _num(s.ci_high),
            }
            if c is not None:
                row |= {"diff_vs_baseline": _num(c.diff), "n_pairs": c.n, "p_value": _num(c.p_value)}
                row |= {"diff_ci_low": _num(c.ci_low), "diff_ci_high": _num(c.ci_high), "mde": _num(c.mde)}
                row |= {"equivalence_margin": _num(c.margin), "equivalence_p": _num(c.equivalence_p)}
            counts = {
                k: cell.stat(k) for k in ("params", "params_non_embedding", "params_trainable", "flops_per_token")
            }
            row |= {k: f"{v:.0f}" if math.isfinite(v) else "" for k, v in counts.items()}
            rows.append(row)
    return rows


def write_csv(path: Path, analysis: Analysis, axis_values: dict[str, dict[str, Any]]) -> None:
    """Writes `report.csv` (see `csv_rows`)."""
    with path.open("w", newline="") as f:
        columns = [*CSV_COLUMNS[:3], *analysis.axes, *CSV_COLUMNS[3:]]
        if _has_trainable(analysis):
            columns.insert(columns.index("params_non_embedding") + 1, "params_trainable")
        writer = csv.DictWriter(f, fieldnames=columns, restval="", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(csv_rows(analysis, axis_values))


def header_markdown(out_dir: Path, info: dict[str, Any], ledger: Ledger, analysis: Analysis) -> str:
    """The report's opening: what was run, how many runs ended how, the code (git commit) behind every
    cell, how to read the tables, warnings.

    Cells compared on different code (several commits, any run from a dirty tree, a run without a
    commit) get a warning, added to `analysis.warnings` too, so that the sweep prints it at its end.
    """
    from contract.run_folder import read_run_json

    # each run's code: the ledger's git_commit, else (ledgers older than that column) its own run.json
    code: dict[str, list[str]] = {}
    for cell in analysis.cells:
        for row in cell.rows:
            run_dir = out_dir / cell.name / f"seed{row['seed']}"
            commit = row.get("git_commit") or read_run_json(run_dir).get("git_commit")
            code.setdefault(cell.name, []).append(str(commit or "unknown"))
    runs = [commit for commits in code.values() for commit in commits]
    shown = {commit: commit[:12] + ("-dirty" if commit.endswith("-dirty") else "") for commit in runs}
    if len(set(runs)) == 1:
        lines = [f"- code: every run at git commit `{shown[runs[0]]}`"]
    else:
        lines = ["- code: each cell's runs by git commit"]
        for cell, commits in code.items():
            counts = ", ".join(f"`{shown[c]}` ×{commits.count(c)}" for c in dict.fromkeys(commits))
            lines.append(f"  - `{cell}`: {counts}")
    problems = []
    distinct = sorted({c.removesuffix("-dirty") for c in runs if c != "unknown"})
    if len(distinct) > 1:
        problems.append(f"{len(distinct)} commits ({', '.join(f'`{c[:12]}`' for c in distinct)})")
    dirty = sum(c.endswith("-dirty") for c in runs)
    if dirty:
        patch = "uncommitted changes; a sweep keeps their patch in the run's `git.diff`"
        problems.append(f"{dirty} of {len(runs)} runs from a dirty tree ({patch})")
    if "unknown" in runs:
        problems.append(f"{runs.count('unknown')} of {len(runs)} runs with no recorded commit")
    if problems:
        warning = (
            f"the runs compared may not have run the same code: {'; '.join(problems)}. Part of a difference may "
            "be a change of code; re-run them from one clean commit (a spec's `require_clean: true` ensures it)."
        )
        if warning not in analysis.warnings:
            analysis.warnings.append(warning)
    statuses = [r["status"] for r in ledger.rows.values()]
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in ENDED if statuses.count(s))
    header = [
        f"# Sweep report: `{out_dir.name}`",
        "",
        f"- spec: `{info.get('spec', '?')}`; base: {', '.join(f'`{b}`' for b in info.get('base', [])) or '?'}",
        f"- fixed: `{json.dumps(info.get('fixed', {}))}`; seeds: {info.get('seeds', '?')}",
        f"- runs: {len(statuses)} ({counts or 'none'}); baseline: `{analysis.baseline or 'none'}`",
        *(lines if runs else []),
        (
            "- statistics over `done` runs only (diverged and failed runs are counted in *runs*, not averaged): "
            f"mean ± sample std, n, {CONFIDENCE:.0%} CI from Student's t; Δ = cell − baseline, paired by seed, "
            f"with its {CONFIDENCE:.0%} CI; p from a {PAIRED_TEST}; MDE: the smallest true Δ these seeds detect "
            f"with {POWER:.0%} power at α = {1 - CONFIDENCE:.2g} (a null result says nothing about smaller ones)"
            + (f"; TOST: {EQUIVALENCE_TEST}, equivalent when p < {1 - CONFIDENCE:.2g}" if analysis.margins else "")
            + "; n/a below 2 values. ★ best (by mean) per metric."
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
    write_summary(out_dir, analysis, "\n\n".join([header, "## Results", tables]), figures)
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
    print(f"TensorBoard (current runs, cell comparison, HParams): tensorboard --logdir {args.dir / SUMMARY_DIR}")
    return 0
