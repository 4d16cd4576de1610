"""The report's Markdown tables: per metric, every cell's statistics and its paired difference from the
baseline (and, with `compare_within`, from its group's reference)."""

from __future__ import annotations

import math

from contract.metrics import higher_is_better
from experiments.analysis.comparison import Analysis, CellResult
from experiments.analysis.formatting import count_text, fixed, has_spikes, has_step_time, has_trainable, p_text
from experiments.analysis.stats import CONFIDENCE, POWER, Comparison


def _diff(c: Comparison | None) -> tuple[str, str, str]:
    """Δ with its interval, p, and the smallest detectable difference, as table cells."""
    if c is None or not c.n or not math.isfinite(c.diff):
        return "n/a", "n/a", "n/a"
    interval = f" [{c.ci_low:+.4f}, {c.ci_high:+.4f}]" if math.isfinite(c.ci_low) else ""
    return f"{c.diff:+.4f}{interval} (n={c.n})", p_text(c.p_value), fixed(c.mde)


def _equivalence(c: Comparison | None) -> str:
    if c is None or not math.isfinite(c.equivalence_p):
        return "n/a"
    return f"{p_text(c.equivalence_p)} ({'equivalent' if c.equivalent else 'not shown'})"


def _unmeasured(analysis: Analysis, metric: str) -> list[str]:
    return [c.name for c in analysis.cells if c.unmeasured(metric)]


def _row(analysis: Analysis, metric: str, rank: int, cell: CellResult, with_delta: bool) -> list[str]:
    """`with_delta`: the table has Δ columns (not when the baseline's runs do not log the metric)."""
    s = cell.summaries[metric]
    mean = "n/a" if not s.n else f"{fixed(s.mean)} ± {fixed(s.std)}" if s.n > 1 else fixed(s.mean)
    ci = f"[{fixed(s.ci_low)}, {fixed(s.ci_high)}]" if s.n > 1 else "n/a"
    margin = metric in analysis.margins
    if not with_delta:
        delta = []
    elif cell.name == analysis.baseline:
        delta = ["baseline", "", ""] + ([""] if margin else [])
    else:
        c = cell.comparisons.get(metric)
        delta = [*_diff(c)] + ([_equivalence(c)] if margin else [])
    mark = "★" if cell.name == analysis.best(metric) else ""
    # a cell with no value (every run failed or diverged) is listed last, unranked
    row = [(f"{rank} {mark}".strip() if s.n else "–") if metric == analysis.main else mark]
    row += [f"`{cell.name}`", cell.runs_text(), mean, str(s.n), ci, *delta]
    if metric == analysis.main:
        counts = ["params", "params_trainable"] if has_trainable(analysis) else ["params"]
        row += [f"{cell.stat(k):,.0f}" if math.isfinite(cell.stat(k)) else "n/a" for k in counts]
        row.append(count_text(cell.stat("flops_per_token")))
        row += [cell.spikes_text()] if has_spikes(analysis) else []
        row += [cell.step_time_text()] if has_step_time(analysis) else []
    return row


def _comparison_head(analysis: Analysis, metric: str) -> list[str]:
    head = [f"Δ [{CONFIDENCE:.0%} CI]", "p", f"MDE ({POWER:.0%})"]
    if metric in analysis.margins:
        head.append(f"TOST p (±{analysis.margins[metric]:g})")
    return head


def metric_table(analysis: Analysis, metric: str) -> str:
    """A Markdown table of one metric: every cell's mean ± std, n, CI and paired difference from the
    baseline (with its interval, p, the smallest detectable difference and, with a margin, the
    equivalence test); the main metric's table also ranks the cells and gives parameters, FLOPs and the runs'
    loss spikes (`LossSpikes`). A cell whose done runs do not log the metric is named under the table, not given
    a row of n/a."""
    main = metric == analysis.main
    head = ["rank" if main else "", "cell", "runs", "mean ± std", "n", f"{CONFIDENCE:.0%} CI"]
    unmeasured = _unmeasured(analysis, metric)
    with_delta = analysis.baseline not in unmeasured  # every Δ would be n/a
    head += _comparison_head(analysis, metric) if with_delta else []
    counts = ["params", "trainable"] if has_trainable(analysis) else ["params"]
    head += [*counts, f"FLOPs/{analysis.flops_per}"] if main else []
    head += ["loss spikes"] if main and has_spikes(analysis) else []
    head += ["ms/step"] if main and has_step_time(analysis) else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    shown = [cell for cell in analysis.cells if not cell.unmeasured(metric)]
    lines += ["| " + " | ".join(_row(analysis, metric, rank, cell, with_delta)) + " |"
              for rank, cell in enumerate(shown, 1)]  # fmt: skip
    if unmeasured:
        lines += ["", f"Not logged by the done runs of {_names(unmeasured)}"
                  + (", the baseline among them: no Δ." if not with_delta else ".")]  # fmt: skip
    return "\n".join(lines)


def _names(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def group_tables(analysis: Analysis, metric: str) -> str:
    """The `compare_within` comparisons of one metric: each group's cells against the group's reference."""
    if not analysis.groups:
        return ""
    head = ["group", "cell", "vs", *_comparison_head(analysis, metric)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    unmeasured = _unmeasured(analysis, metric)
    for group in analysis.groups:
        if group.reference in unmeasured:
            continue
        for name, by_metric in group.comparisons.items():
            if name in unmeasured:
                continue
            c = by_metric.get(metric)
            extra = [_equivalence(c)] if metric in analysis.margins else []
            cells = [group.group, f"`{name}`", f"`{group.reference}`", *_diff(c), *extra]
            lines.append("| " + " | ".join(cells) + " |")
    if len(lines) == 2:
        return ""
    axes = ", ".join(f"`{a}`" for a in analysis.groups[0].axes)
    title = f"Within groups of {axes} (each cell vs the group's cell with the baseline's other values):"
    return title + "\n\n" + "\n".join(lines)


def tables_markdown(analysis: Analysis) -> str:
    """Every metric's table, the main metric first."""
    metrics = ([analysis.main] if analysis.main else []) + [m for m in analysis.metrics if m != analysis.main]
    nowhere = [m for m in metrics if m != analysis.main and len(_unmeasured(analysis, m)) == len(analysis.cells)]
    parts = []
    for metric in [m for m in metrics if m not in nowhere]:
        direction = "higher is better" if higher_is_better(metric) else "lower is better"
        title = f"### {metric} ({direction}){' — main metric' if metric == analysis.main else ''}"
        groups = group_tables(analysis, metric)
        parts.append(f"{title}\n\n{metric_table(analysis, metric)}" + (f"\n\n{groups}" if groups else ""))
    if nowhere:  # a column of the ledger no done run filled (a length past learned positions' table): no empty table
        parts.append(f"Logged by no done run: {_names(nowhere)}.")
    return "\n\n".join(parts)
