"""A `horizons:` sweep's results as data (`experiments.sweep.horizons`: every cell at several training lengths, from
one stable run and a decay branch each): per cell, the final metric at each horizon with its training tokens and
FLOPs; the ranking at each horizon with each cell's paired difference from the baseline; the pairs of cells whose
order changes between two horizons; and the run-steps the branching saved. `horizons_section` writes the report's
`## Horizons` section from it.

Budgets are the runs' own: tokens are steps × `data.batch_size` × `data.seq_len` × `trainer.accumulate_grad_batches`
× processes of the cell's resolved config (examples without a `seq_len`); FLOPs are 3 × the ledger's forward
`flops_per_token` × tokens.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.metrics import higher_is_better
from contract.run_folder import FINISHED
from experiments.analysis import plots
from experiments.analysis.comparison import Analysis
from experiments.analysis.decisions import interval
from experiments.analysis.formatting import count_text
from experiments.analysis.ladder_report import SeedValues
from experiments.analysis.stats import Comparison, paired_difference
from experiments.records.ledger import PARENT_COLUMN, PHASE_COLUMN, SEARCH_MARK, STABLE_PHASE, Ledger


def budget_per_step(resolved: dict[str, Any]) -> tuple[float, str]:
    """(training tokens per optimizer step, "tokens"), or examples per step without a `seq_len`, of a resolved
    config; nan where it names no batch size."""
    data = (resolved.get("data") or {}).get("init_args") or {}
    trainer = resolved.get("trainer") or {}
    devices, nodes = trainer.get("devices"), trainer.get("num_nodes")
    processes = (
        len(devices) if isinstance(devices, list) else devices if isinstance(devices, int) and devices > 0 else 1
    )
    processes *= nodes if isinstance(nodes, int) and nodes > 0 else 1
    examples = float(data.get("batch_size", math.nan)) * processes * (trainer.get("accumulate_grad_batches") or 1)
    return (examples * data["seq_len"], "tokens") if "seq_len" in data else (examples, "examples")


@dataclass(frozen=True)
class HorizonResult(SeedValues):
    """One cell at one horizon: the final metric of each done run (seed -> value) and the horizon's budget."""

    values: dict[int, float]
    budget: float  # training tokens (examples for data without a sequence length)
    flops: float  # training FLOPs


@dataclass(frozen=True)
class HorizonRanking:
    """The cells at one horizon, best first, and each one's paired difference from the baseline cell there."""

    horizon: int
    ranking: tuple[str, ...]
    differences: dict[str, Comparison]


@dataclass(frozen=True)
class RankCrossing:
    """Two cells whose order (by their mean difference over the seeds both have) changes between two consecutive
    horizons where both have runs.

    Args:
        cells: the pair, in the sweep's order.
        low, high: the horizons between which the order changes.
        before, after: first − second, paired by seed, at `low` and at `high`.
    """

    cells: tuple[str, str]
    low: int
    high: int
    before: Comparison
    after: Comparison

    @property
    def beyond_noise(self) -> bool:
        """Both 95% CIs exclude 0 (on opposite sides, as the means' signs differ)."""
        return all(c.ci_low > 0 or c.ci_high < 0 for c in (self.before, self.after))


@dataclass(frozen=True)
class BranchingCost:
    """What a cell's horizons cost per seed, branched and as separate runs.

    Args:
        stable: the stable run's steps (the longest horizon's decay start).
        decays: each horizon's branch steps (from its decay start to its end).
    """

    stable: int
    decays: dict[int, int]

    @property
    def branched(self) -> int:
        return self.stable + sum(self.decays.values())

    @property
    def separate(self) -> int:
        """Each horizon trained from scratch: the sum of the horizons."""
        return sum(self.decays.keys())

    @property
    def saved(self) -> float:
        return 1 - self.branched / self.separate


@dataclass(frozen=True)
class HorizonTable:
    """A horizons sweep's results for one metric.

    Args:
        metric: the metric (the report's main one).
        horizons: the lengths in steps, ascending.
        unit: what the budget counts: tokens, or examples.
        baseline: the baseline cell (before the horizons: compared at every horizon); None without one.
        rows: cell -> horizon -> its result.
        rankings: each horizon's ranking and differences from the baseline.
        crossings: the pairs whose order changes between consecutive horizons; `pairs` were compared.
        costs: cell -> what its horizons cost per seed; `seeds` per cell in the spec.
        trained: run-steps the ledger's finished runs trained (stable runs' steps, branches' steps past their start).
    """

    metric: str
    horizons: tuple[int, ...]
    unit: str
    baseline: str | None
    rows: dict[str, dict[int, HorizonResult]]
    rankings: tuple[HorizonRanking, ...]
    crossings: tuple[RankCrossing, ...]
    pairs: int
    costs: dict[str, BranchingCost]
    seeds: int
    trained: int


def crossings(rows: dict[str, dict[int, HorizonResult]], horizons: tuple[int, ...]) -> tuple[list[RankCrossing], int]:
    """Every pair of cells whose mean paired difference changes sign between consecutive horizons where both have
    runs in common (a tie is no order), and how many pairs had two such horizons to compare."""
    found, compared = [], 0
    for a, b in itertools.combinations(rows, 2):
        diffs = []
        for horizon in horizons:
            if horizon in rows[a] and horizon in rows[b]:
                d = paired_difference(rows[a][horizon].values, rows[b][horizon].values)
                if d.n and math.isfinite(d.diff) and d.diff != 0:
                    diffs.append((horizon, d))
        compared += len(diffs) > 1
        for (low, before), (high, after) in itertools.pairwise(diffs):
            if (before.diff < 0) != (after.diff < 0):
                found.append(RankCrossing((a, b), low, high, before, after))
    return found, compared


def costs(info: dict[str, Any]) -> dict[str, BranchingCost]:
    """cell -> its horizons' cost per seed, from where each horizon's branch starts (`sweep.json`)."""
    block = info["horizons"]
    starts, out = block.get("starts") or {}, {}
    by_cell: dict[str, dict[int, int]] = {}
    for name, (cell, horizon) in block["cells"].items():
        if name in starts:
            by_cell.setdefault(cell, {})[horizon] = starts[name]
    for cell, at in by_cell.items():
        if len(at) == len(block["steps"]):
            out[cell] = BranchingCost(at[max(at)], {h: h - s for h, s in sorted(at.items())})
    return out


def trained_steps(ledger: Ledger, info: dict[str, Any]) -> int:
    """Run-steps the sweep's finished runs trained: each stable run's steps, each branch's steps past its start."""
    starts, total = (info["horizons"].get("starts") or {}), 0
    for row in ledger.rows.values():
        try:
            steps = float(row.get("steps") or "nan")
        except ValueError:
            continue
        if row["status"] not in FINISHED or not math.isfinite(steps):
            continue
        if row.get(PHASE_COLUMN) == STABLE_PHASE:
            total += int(steps)
        elif row.get(PARENT_COLUMN) and (base := row["cell"].partition(SEARCH_MARK)[0]) in starts:
            total += max(0, int(steps) - starts[base])  # a branch (a tuned sweep's: a search or final one)
    return total


def horizon_table(analysis: Analysis, info: dict[str, Any], ledger: Ledger, metric: str) -> HorizonTable:
    """A horizons sweep's results for `metric` (see `HorizonTable`), from its analysis, `sweep.json` and ledger."""
    block = info["horizons"]
    horizons, where = tuple(block["steps"]), block["cells"]
    resolved = {c["name"]: c.get("resolved") or {} for c in info.get("cells", [])}
    results = {c.name: c for c in analysis.cells}
    rows: dict[str, dict[int, HorizonResult]] = {cell: {} for cell, _ in where.values()}
    units = set()
    for name, (cell, horizon) in where.items():
        per_step, unit = budget_per_step(resolved.get(name, {}))
        units.add(unit)
        result = results.get(name)
        flops = 3.0 * (result.stat("flops_per_token") if result else math.nan) * horizon * per_step
        if result is not None:
            values = result.values(metric)
            rows[cell][horizon] = HorizonResult(values, horizon * per_step, flops if unit == "tokens" else math.nan)
    baseline = where.get(analysis.baseline or "", [None])[0]
    sign, margin = (-1.0 if higher_is_better(metric) else 1.0), analysis.margins.get(metric)
    rankings = []
    for horizon in horizons:
        here = {cell: at[horizon] for cell, at in rows.items() if horizon in at and at[horizon].values}
        differences = {
            cell: paired_difference(result.values, here[baseline].values, margin)
            for cell, result in here.items()
            if baseline in here and cell != baseline
        }
        ranking = tuple(sorted(here, key=lambda c: sign * here[c].mean))
        rankings.append(HorizonRanking(horizon, ranking, differences))
    found, pairs = crossings(rows, horizons)
    seeds = len(info.get("seeds") or [0])
    unit = "tokens" if units == {"tokens"} else "examples"
    return HorizonTable(metric, horizons, unit, baseline, rows, tuple(rankings), tuple(found), pairs, costs(info),
                        seeds, trained_steps(ledger, info))  # fmt: skip


def horizon_results(analysis: Analysis, info: dict[str, Any], ledger: Ledger) -> HorizonTable | None:
    """The main metric's `HorizonTable` of a horizons sweep; None without `horizons:` or before any metric."""
    if not info.get("horizons") or analysis.main is None:
        return None
    return horizon_table(analysis, info, ledger, analysis.main)


def horizons_section(out_dir: Path, analysis: Analysis, info: dict[str, Any], ledger: Ledger) -> tuple[str, list]:
    """The report's `## Horizons` section and its figures (caption, path relative to `out_dir`)."""
    table = horizon_results(analysis, info, ledger)
    if table is None:
        return "## Horizons\n\nNo validation metric logged yet.", []
    parts = ["## Horizons", _results(table), _rankings(table), _crossings(table), _cost(table)]
    figures = []
    for key, label in ((0, f"training {table.unit}"), (1, "training FLOPs")):
        points = {cell: {(r.budget, r.flops)[key]: list(r.values.values()) for r in at.values()}
                  for cell, at in table.rows.items()}  # fmt: skip
        path = Path("plots") / f"horizons_{('budget', 'flops')[key]}.png"
        if plots.budget_curves(points, label, table.metric, out_dir / path):
            figures.append((f"final {table.metric} against {label} (horizons; band: min–max over seeds)", path))
    return "\n\n".join(parts), figures


def _results(table: HorizonTable) -> str:
    lines = [
        f"Each cell trained to each horizon (one stable run per cell and seed, a decay branch per horizon): "
        f"final `{table.metric}`, mean ± std over seeds (n), with the horizon's training {table.unit} and FLOPs."
    ]
    head = ["cell", *(f"{h} steps" for h in table.horizons)]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cell, at in table.rows.items():
        shown = []
        for horizon in table.horizons:
            r = at.get(horizon)
            if r is None or not r.values:
                shown.append("—")
                continue
            spread = f" ± {r.std:.3f}" if len(r.values) > 1 else ""
            flops = f", {r.flops:.2e} FLOPs" if math.isfinite(r.flops) else ""
            shown.append(f"{r.mean:.3f}{spread} ({len(r.values)}) · {count_text(r.budget)} {table.unit}{flops}")
        rows.append("| " + " | ".join([f"`{cell}`", *shown]) + " |")
    return "\n\n".join([*lines, "\n".join(rows)])


def _rankings(table: HorizonTable) -> str:
    baseline = table.baseline
    head = f"| horizon | ranking (best first) | {f'− `{baseline}` [95% CI], p' if baseline else ''} |"
    rows = [head, "|---|---|---|"]
    for at in table.rankings:
        diffs = "; ".join(f"`{cell}` {_difference(d)}" for cell, d in at.differences.items() if d.n)
        rows.append(f"| {at.horizon} | {' > '.join(f'`{c}`' for c in at.ranking)} | {diffs} |")
    return f"Ranking by `{table.metric}` at each horizon, with each cell's paired difference from the baseline:\n\n" + (
        "\n".join(rows)
    )


def _crossings(table: HorizonTable) -> str:
    lines = []
    for c in table.crossings:
        (a, b), budget = c.cells, _budget_interval(table, c)
        noise = ("the order reverses beyond the noise (both 95% CIs exclude 0)" if c.beyond_noise else
                 "in the means only (a 95% CI holds 0)" if min(c.before.n, c.after.n) > 1 else
                 "in the means only (one seed: no CI)")  # fmt: skip
        lines.append(f"- `{a}` and `{b}` cross between {c.low} and {c.high} steps{budget}: `{a}` − `{b}` = "
                     f"{_difference(c.before)} at {c.low}, {_difference(c.after)} at {c.high}; {noise}.")  # fmt: skip
    if not lines:
        lines = [f"- No pair of cells changes order between horizons ({table.pairs} pair(s) compared at two or more)."]
    return "Rankings across horizons: pairs of cells whose order by their seed means changes between consecutive " \
        "horizons (paired differences by seed):\n\n" + "\n".join(lines)  # fmt: skip


def _difference(d: Comparison) -> str:
    return interval(d) if d.n > 1 else f"{d.diff:+.3f} (one seed: no CI)"


def _budget_interval(table: HorizonTable, c: RankCrossing) -> str:
    at = table.rows[c.cells[0]]
    low, high = at[c.low].budget, at[c.high].budget
    return f" ({count_text(low)}–{count_text(high)} {table.unit})" if math.isfinite(low) and math.isfinite(high) else ""


def _cost(table: HorizonTable) -> str:
    if not table.costs:
        return "Cost of branching: not known (this sweep.json keeps no branch starts)."
    kinds = {(c.stable, tuple(c.decays.items())) for c in table.costs.values()}
    branched = sum(c.branched for c in table.costs.values()) * table.seeds
    separate = sum(c.separate for c in table.costs.values()) * table.seeds
    if len(kinds) == 1:
        c = next(iter(table.costs.values()))
        decays = " + ".join(str(d) for d in c.decays.values())
        each = (f"per cell and seed, the stable run ({c.stable} steps) and the decay branches ({decays}) train "
                f"{c.branched:,} run-steps for all {len(c.decays)} horizons, against {c.separate:,} for separate runs "
                f"from scratch ({' + '.join(str(h) for h in c.decays)})")  # fmt: skip
    else:
        each = "per cell and seed: " + "; ".join(f"`{cell}` {c.branched:,} against {c.separate:,}"
                                                  for cell, c in table.costs.items())  # fmt: skip
    return (
        f"Cost of branching: {each}. The sweep's {len(table.costs)} cell(s) × {table.seeds} seed(s): "
        f"{branched:,} run-steps instead of {separate:,}, {1 - branched / separate:.0%} saved (separate runs would "
        f"train {separate / branched:.2f}× as many). Its finished runs have trained {table.trained:,} run-steps."
    )
