"""A sweep's report, from its ledger and event files (`cli.py report DIR`, and the end of `cli.py sweep`).

Writes `DIR/report.md` (tables and plots), `DIR/report.csv` (the same numbers, one row per
metric and cell), `DIR/plots/*.png` and the TensorBoard view `DIR/_summary/` (`tb_summary`). Only runs
that finished (`done`) enter the statistics; diverged and failed runs are counted and shown.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contract.run_folder import ENDED
from experiments.analysis.code_check import check_code
from experiments.analysis.comparison import Analysis, analyse
from experiments.analysis.figures import make_plots
from experiments.analysis.horizons_report import HorizonTable, horizon_results, horizons_section
from experiments.analysis.ladder_report import LadderTable, ladder_section, ladder_tables
from experiments.analysis.markdown_tables import metric_table, tables_markdown
from experiments.analysis.report_csv import write_csv
from experiments.analysis.stats import CONFIDENCE, EQUIVALENCE_TEST, PAIRED_TEST, POWER
from experiments.analysis.tb_summary import write_summary
from experiments.analysis.transfer_report import transfer_section
from experiments.analysis.tuning_report import tuning_section
from experiments.records.layout import LEDGER_NAME, REPORT_NAME, SWEEP_INFO
from experiments.records.ledger import Ledger


def header_markdown(out_dir: Path, info: dict[str, Any], ledger: Ledger, analysis: Analysis, code: list[str]) -> str:
    """The report's opening: what was run, how many runs ended how, the code (git commit) behind every
    cell (`code`: `CodeCheck.lines`), how to read the tables, warnings."""
    statuses = [r["status"] for r in ledger.rows.values()]
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in ENDED if statuses.count(s))
    tested = analysis.margins.keys() & set(analysis.metrics)  # a margin on a metric no run logged tests nothing
    header = [
        f"# Sweep report: `{out_dir.name}`",
        "",
        f"- spec: `{info.get('spec', '?')}`; base: {', '.join(f'`{b}`' for b in info.get('base', [])) or '?'}",
        f"- fixed: `{json.dumps(info.get('fixed', {}))}`; seeds: {info.get('seeds', '?')}",
        f"- runs: {len(statuses)} ({counts or 'none'}); baseline: `{analysis.baseline or 'none'}`",
        *code,
        (
            "- statistics over `done` runs only (diverged and failed runs are counted in *runs*, not averaged): "
            f"mean ± sample std, n, {CONFIDENCE:.0%} CI from Student's t; Δ = cell − baseline, paired by seed, "
            f"with its {CONFIDENCE:.0%} CI; p from a {PAIRED_TEST}; MDE: the smallest true Δ these seeds detect "
            f"with {POWER:.0%} power at α = {1 - CONFIDENCE:.2g} (a null result says nothing about smaller ones)"
            + (f"; TOST: {EQUIVALENCE_TEST}, equivalent when p < {1 - CONFIDENCE:.2g}" if tested else "")
            + "; n/a below 2 values. ★ best (by mean) per metric."
        ),
    ]
    header += [f"\n> **Warning:** {w}" for w in analysis.warnings]
    return "\n".join(header)


def load(out_dir: Path) -> tuple[dict[str, Any], Ledger, Analysis]:
    """A sweep folder's `sweep.json` ({} without one), its ledger, and their analysis."""
    info_path = out_dir / SWEEP_INFO
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    ledger = Ledger(out_dir / LEDGER_NAME)
    return info, ledger, analyse(ledger, info)


def ladder_results(out_dir: Path) -> list[LadderTable]:
    """A ladder sweep's results as data (what its report's `## Ladder` section shows): one table for the main
    metric and one per `ladder_metrics` logged; [] for a sweep without a ladder or before any metric.

    Args:
        out_dir: a sweep folder.
    """
    info, _, analysis = load(out_dir)
    return ladder_tables(analysis, info) if info.get("ladder") else []


def horizons_results(out_dir: Path) -> HorizonTable | None:
    """A horizons sweep's results as data (what its report's `## Horizons` section shows), for the main metric; None
    for a sweep without `horizons:` or before any metric.

    Args:
        out_dir: a sweep folder.
    """
    info, ledger, analysis = load(out_dir)
    return horizon_results(analysis, info, ledger)


def build_report(out_dir: Path) -> str:
    """Writes report.md, report.csv, the plots and the TensorBoard summary of the sweep in `out_dir`.

    Args:
        out_dir: a sweep folder (holding `results.csv`, and `sweep.json` when made by `cli.py sweep`).

    Returns:
        The main metric's table and the warnings, for printing.
    """
    info, ledger, analysis = load(out_dir)
    axis_values = {c.name: {a: c.rows[0].get(a, "") for a in analysis.axes} for c in analysis.cells}
    figures = make_plots(out_dir, analysis, (info.get("horizons") or {}).get("starts"))
    code = check_code(out_dir, analysis)
    if code.warning and code.warning not in analysis.warnings:
        analysis.warnings.append(code.warning)  # printed by the sweep at its end, too
    header = header_markdown(out_dir, info, ledger, analysis, code.lines)
    tables = tables_markdown(analysis)
    sections = [header, "## Results", tables]
    if info.get("tune"):  # each cell's chosen values, bracketing, sensitivity and its curves
        tuning, tuning_figures = tuning_section(out_dir, ledger, info)
        sections.append(tuning)
        figures += tuning_figures
        tables += "\n\n" + tuning
    if info.get("ladder"):  # per-cell scaling fits, the ranking at each size, crossings, log-log plots
        ladder, ladder_figures = ladder_section(out_dir, analysis, info)
        if (info.get("tune") or {}).get("transfer"):  # tuned once: did the transfer hold at the largest size?
            ladder += "\n\n" + transfer_section(ledger, info)
        sections.append(ladder)
        figures = ladder_figures + figures
        tables += "\n\n" + ladder
    if info.get("horizons"):  # the budget axis: the metric against tokens, rankings per horizon, crossings, cost
        horizons, horizon_figures = horizons_section(out_dir, analysis, info, ledger)
        sections.append(horizons)
        figures = horizon_figures + figures
        tables += "\n\n" + horizons
    if figures:
        sections += ["## Plots"] + [f"### {caption}\n\n![{caption}]({path.as_posix()})" for caption, path in figures]
    markdown = "\n\n".join(sections)
    (out_dir / REPORT_NAME).write_text(markdown + "\n")
    write_csv(out_dir / "report.csv", analysis, axis_values)
    write_summary(out_dir, analysis, "\n\n".join([header, "## Results", tables]), figures)
    main_table = (
        f"{analysis.main}:\n\n{metric_table(analysis, analysis.main)}" if analysis.main else "(no val/* metric logged)"
    )
    return "\n".join([main_table, *(f"Warning: {w}" for w in analysis.warnings)])
