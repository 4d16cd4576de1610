"""A sweep's comparison: each cell's runs, outcome counts and statistics per metric, in report order."""

from __future__ import annotations

import difflib
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import yaml

from contract.metrics import EVALUATION_PREFIXES, higher_is_better, on_test_split
from contract.run_folder import CONFIG_FILE, DIVERGED, DONE, FAILED
from experiments.analysis.stats import Comparison, Summary, paired_difference, summarize
from experiments.records.ledger import (
    PHASE_COLUMN,
    SEARCH_PHASE,
    STABLE_PHASE,
    VERIFY_PHASE,
    Ledger,
    metric_sort_key,
)
from experiments.records.values import format_value

PARAMS_TOLERANCE = 0.05  # warn when cells' parameter counts differ by more than this fraction


def _float(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "") else math.nan
    except ValueError:
        return math.nan


@dataclass
class CellResult:
    """One cell's runs and statistics.

    Args:
        name: the cell.
        rows: its ledger rows.
        summaries: metric -> summary over its done runs.
        comparisons: metric -> paired difference from the baseline (absent for the baseline itself).
    """

    name: str
    rows: list[dict[str, str]]
    summaries: dict[str, Summary] = field(default_factory=dict)
    comparisons: dict[str, Comparison] = field(default_factory=dict)

    def count(self, status: str) -> int:
        return sum(row["status"] == status for row in self.rows)

    def values(self, metric: str) -> dict[int, float]:
        """seed -> value of the done runs with a finite value."""
        out = {int(r["seed"]): _float(r.get(metric)) for r in self.rows if r["status"] == DONE}
        return {seed: v for seed, v in out.items() if math.isfinite(v)}

    def unmeasured(self, metric: str) -> bool:
        """Done runs, none of which logs `metric` (a `test_avg/*` of a cell that does not average, a length a
        learned position table cannot reach): nothing to show, unlike a cell whose runs diverged."""
        return self.count(DONE) > 0 and not self.values(metric)

    def stat(self, column: str) -> float:
        """A model statistic (params, FLOPs): the same for every run of a cell; taken from any run."""
        found = [_float(r.get(column)) for r in self.rows]
        return next((v for v in found if math.isfinite(v)), math.nan)

    def spikes_text(self) -> str:
        """The loss spikes of the cell's runs (`LossSpikes`): their total, and how many runs had any."""
        counts = [int(_float(r.get("loss_spikes"))) for r in self.rows if math.isfinite(_float(r.get("loss_spikes")))]
        if not counts:
            return "n/a"
        spiked = sum(c > 0 for c in counts)
        return f"{sum(counts)} ({spiked}/{len(counts)} runs)" if spiked else "0"

    def step_time_text(self) -> str:
        """The mean training-step time of the cell's done runs (`step_time_ms`) ± its std over them; n/a for
        runs from before it was recorded."""
        times = [_float(r.get("step_time_ms")) for r in self.rows if r["status"] == DONE]
        times = [t for t in times if math.isfinite(t)]
        if not times:
            return "n/a"
        return f"{statistics.fmean(times):.1f}" + (f" ± {statistics.stdev(times):.1f}" if len(times) > 1 else "")

    def runs_text(self) -> str:
        text = f"{self.count('done')}/{len(self.rows)}"
        extra = [f"{self.count(s)} {s}" for s in (DIVERGED, FAILED) if self.count(s)]
        return ", ".join([text, *extra])


@dataclass
class GroupComparison:
    """Cells compared within a group that shares the values of the spec's `compare_within` axes.

    Args:
        axes: the `compare_within` axes.
        group: their values for this group (`activation=geglu`).
        reference: the group's cell with the baseline's values on the other axes.
        comparisons: cell -> metric -> its paired difference from the reference.
    """

    axes: tuple[str, ...]
    group: str
    reference: str
    comparisons: dict[str, dict[str, Comparison]]


@dataclass
class Analysis:
    """The whole comparison: cells in report order, metrics, the baseline and the main metric."""

    cells: list[CellResult]
    metrics: list[str]
    main: str | None
    baseline: str | None
    axes: list[str]
    warnings: list[str]
    margins: dict[str, float] = field(default_factory=dict)
    groups: list[GroupComparison] = field(default_factory=list)
    flops_per: str = "token"  # what the runs' `flops_per_token` counts (`flops_unit`)

    def best(self, metric: str) -> str | None:
        scored = [c for c in self.cells if c.summaries[metric].n]
        if not scored:
            return None
        sign = -1 if higher_is_better(metric) else 1
        return min(scored, key=lambda c: sign * c.summaries[metric].mean).name


def main_metric(metrics: list[str], info: dict[str, Any]) -> str | None:
    """What ranks the cells: a tuned sweep's selection metric on the test split (`val/loss` selects,
    `test/loss` compares); otherwise `val/loss`, else the first validation metric."""
    tuned = (info.get("tune") or {}).get("metric")
    if tuned and on_test_split(tuned) in metrics:
        return on_test_split(tuned)
    return "val/loss" if "val/loss" in metrics else next((m for m in metrics if m.startswith("val/")), None)


def flops_unit(info: dict[str, Any], ledger: Ledger | None = None) -> str:
    """What the runs' `flops_per_token` counts: a token, or an image for a classifier (the ViT papers' GFLOPs per
    image: `ImageClassifier.model_stats`), from the cells' resolved model class; a `sweep.json` from before cells
    recorded theirs falls back to a run's own resolved config (`<cell>/seed<k>/config.yaml`)."""
    classes = [str(((c.get("resolved") or {}).get("model") or {}).get("class_path", "")) for c in info.get("cells", [])]
    if not any(classes) and ledger is not None:
        configs = (ledger.path.parent / cell / f"seed{seed}" / CONFIG_FILE for cell, seed in ledger.rows)
        config = next((path for path in configs if path.exists()), None)
        model = ((yaml.safe_load(config.read_text()) or {}).get("model") or {}) if config else {}
        classes = [str(model.get("class_path", ""))]
    return "image" if any(path.endswith("ImageClassifier") for path in classes) else "token"


def analyse(ledger: Ledger, info: dict[str, Any]) -> Analysis:
    """Computes every cell's statistics from the ledger.

    Args:
        ledger: the runs.
        info: `sweep.json` (cell order, baseline, axes); {} for a bare ledger.
    """
    # a tuned sweep's search runs choose each cell's values (a ladder's verify runs check a transfer of them); its
    # final runs are what the cells compare. A `horizons:` sweep's stable runs are where its branches start from
    skipped = (SEARCH_PHASE, VERIFY_PHASE, STABLE_PHASE)
    compared = {key: row for key, row in ledger.rows.items() if row.get(PHASE_COLUMN) not in skipped}
    order = [c["name"] for c in info.get("cells", [])]
    order += [cell for cell in dict.fromkeys(cell for cell, _ in compared) if cell not in order]
    cells = [CellResult(name, [r for (c, _), r in compared.items() if c == name]) for name in order]
    cells = [c for c in cells if c.rows]
    columns = {key for row in compared.values() for key in row}
    metrics = sorted((k for k in columns if k.startswith(EVALUATION_PREFIXES)), key=metric_sort_key)
    main = main_metric(metrics, info)
    baseline = info.get("baseline") if info.get("baseline") in {c.name for c in cells} else None
    base_cell = next((c for c in cells if c.name == baseline), None)
    margins = {k: float(v) for k, v in (info.get("equivalence_margin") or {}).items()}
    for cell in cells:
        for metric in metrics:
            cell.summaries[metric] = summarize(list(cell.values(metric).values()))
            if base_cell is not None and cell is not base_cell:
                cell.comparisons[metric] = paired_difference(
                    cell.values(metric), base_cell.values(metric), margins.get(metric)
                )
    if main:
        sign = -1 if higher_is_better(main) else 1
        # cells without a value (all diverged or failed) go last, in spec order
        cells.sort(
            key=lambda c: (c.summaries[main].n == 0, sign * c.summaries[main].mean if c.summaries[main].n else 0)
        )
    warnings = []
    # what training could change is the capacity compared: trainable parameters (PEFT, freezing), else totals
    # (a ledger written before `params_trainable` existed)
    column = "params_trainable" if all(math.isfinite(c.stat("params_trainable")) for c in cells) else "params"
    params = {c.name: c.stat(column) for c in cells if math.isfinite(c.stat(column))}
    if params and max(params.values()) > (1 + PARAMS_TOLERANCE) * min(params.values()):
        low, high = min(params, key=params.get), max(params, key=params.get)
        what = "trainable parameter counts" if column == "params_trainable" else "parameter counts"
        warnings.append(
            f"{what} differ by {max(params.values()) / min(params.values()) - 1:.1%} between cells "
            f"({low}: {params[low]:,.0f}, {high}: {params[high]:,.0f}); part of a difference may be capacity"
        )
    if metrics:  # (before any run has ended there is nothing to name)
        for metric in sorted(margins.keys() - set(metrics)):  # a misspelt margin would otherwise just be absent
            close = difflib.get_close_matches(metric, metrics, n=1)
            warnings.append(f"equivalence_margin names `{metric}`, which no compared run logged, so no equivalence "
                            "test ran for it" + (f"; did you mean `{close[0]}`?" if close else ""))  # fmt: skip
    groups = compare_within(cells, metrics, info, baseline, margins)
    axes = list(info.get("axes", []))
    return Analysis(cells, metrics, main, baseline, axes, warnings, margins, groups, flops_unit(info, ledger))


def compare_within(
    cells: list[CellResult], metrics: list[str], info: dict[str, Any], baseline: str | None, margins: dict[str, float]
) -> list[GroupComparison]:
    """The spec's `compare_within` comparisons: in each group of cells sharing the values of those
    axes, every cell against the group's cell that has the baseline's values on the other axes
    (ffn_norm's `compare_within: model.arch.activation`: RMSNorm vs LayerNorm per activation)."""
    within = info.get("compare_within") or []
    within = [within] if isinstance(within, str) else list(within)
    overrides = {c["name"]: c["overrides"] for c in info.get("cells", [])}
    if not within or baseline not in overrides:
        return []
    by_name = {c.name: c for c in cells}
    others = {k: v for k, v in overrides[baseline].items() if k not in within}
    groups: dict[tuple, list[str]] = {}
    for name, values in overrides.items():
        if name in by_name:
            groups.setdefault(tuple(format_value(values.get(k)) for k in within), []).append(name)
    labels = {k: k.rsplit(".", 1)[-1] for k in within}
    out = []
    for key, names in groups.items():
        reference = next(
            (n for n in names if all(format_value(overrides[n].get(k)) == format_value(v) for k, v in others.items())),
            None,
        )
        if reference is None or len(names) < 2:
            continue
        group = ",".join(f"{labels[k]}={v}" for k, v in zip(within, key))
        comparisons = {
            name: {
                m: paired_difference(by_name[name].values(m), by_name[reference].values(m), margins.get(m))
                for m in metrics
            }
            for name in names
            if name != reference
        }
        out.append(GroupComparison(tuple(within), group, reference, comparisons))
    return out
