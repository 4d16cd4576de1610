"""A tuned sweep's search, as the report shows it: each cell's chosen values, whether the search bracketed
them, its learning-rate sensitivity, and the sensitivity curves (the selection metric against each tuned key).

Everything is read from the ledger's search rows (`phase: search`, one cell `<cell>~<point>` per point):
the keys a cell's search left open are those its final runs record (`unbracketed`, the engine's rule in
`experiments.sweep.tuning`); a ledger from before that column is read by its edges.

Learning-rate sensitivity (Wortsman et al. 2023, "Small-scale proxies for large-scale Transformer
training instabilities", §2): the mean over the initial grid (the range every cell searched) of
min(metric, cap) − the cell's best, signs flipped for a metric where higher is better; a diverged or
failed point counts as the cap. The cap is the worst finite value any cell's search reached, so one
number is comparable across cells: 0 means the cell does equally well anywhere in the range.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.metrics import higher_is_better
from contract.run_folder import DONE
from experiments.analysis import plots
from experiments.analysis.formatting import fixed
from experiments.records.ledger import (
    PHASE_COLUMN,
    SEARCH_MARK,
    SEARCH_PHASE,
    STABLE_PHASE,
    UNBRACKETED_COLUMN,
    VERIFY_PHASE,
    Ledger,
)
from experiments.records.values import format_value


@dataclass
class CellSearch:
    """One cell's search points: tuned values -> the selection metric of each tune seed (nan: diverged or failed).

    Args:
        cell: the cell.
        points: (value of each tuned key) -> the metric of each tune seed, in seed order.
        chosen: the values its final runs used (None before the final phase).
    """

    cell: str
    points: dict[tuple[float, ...], list[float]] = field(default_factory=dict)
    chosen: tuple[float, ...] | None = None
    open_keys: tuple[str, ...] | None = None  # what the engine recorded left unbracketed; None in older ledgers

    def mean(self, point: tuple[float, ...]) -> float:
        values = self.points.get(point, [])
        return sum(values) / len(values) if values and all(math.isfinite(v) for v in values) else math.nan

    def unbracketed(self, keys: list[str]) -> list[str]:
        """The keys the search left open, as its final runs recorded them (the engine's rule: an edge still
        improving); in a ledger from before that column, the keys whose chosen value is the lowest or highest
        this cell searched."""
        if self.chosen is None:
            return []
        if self.open_keys is not None:
            return [key for key in keys if key in self.open_keys]
        out = []
        for i, key in enumerate(keys):
            searched = sorted({p[i] for p in self.points})
            if len(searched) > 1 and self.chosen[i] in (searched[0], searched[-1]):
                out.append(key)
        return out


def searches(ledger: Ledger, info: dict[str, Any]) -> tuple[list[str], str, dict[str, CellSearch]]:
    """The tuned keys, the selection metric and each cell's search, from the ledger."""
    tune = info["tune"]
    keys, metric = list(tune["grid"]), tune["metric"]
    found: dict[str, CellSearch] = {}
    for (cell, _), row in sorted(ledger.rows.items(), key=lambda item: item[0][1]):  # seed order: `seed_range`
        if row.get(PHASE_COLUMN) in (VERIFY_PHASE, STABLE_PHASE):  # a transfer's check at a ladder's top
            continue  # (`transfer_report`); with horizons, where a point's branches start
        base = cell.partition(SEARCH_MARK)[0]
        entry = found.setdefault(base, CellSearch(base))
        point = tuple(float(row[k]) for k in keys)
        if row.get(PHASE_COLUMN) == SEARCH_PHASE:
            value = float(row.get(metric) or "nan") if row["status"] == DONE else math.nan
            entry.points.setdefault(point, []).append(value)
        else:
            entry.chosen = point
            if UNBRACKETED_COLUMN in row:
                entry.open_keys = tuple(k for k in row[UNBRACKETED_COLUMN].split(",") if k)
    order = [c["name"] for c in info.get("cells", [])]
    return keys, metric, {name: found[name] for name in [*order, *found] if name in found}


def counterparts(info: dict[str, Any]) -> dict[str, str]:
    """With `tune.search_on` or a ladder's `tune.transfer`: each cell that did not search -> the cell whose search
    chose its point (with its grid values `search_on`'s, at the size that searched)."""
    on = info["tune"].get("search_on") or {}
    if transfer := info["tune"].get("transfer"):
        on = on | next(s["overrides"] for s in info["ladder"]["sizes"] if s["name"] == transfer["from"])
    cells = info.get("cells", [])
    out = {}
    for cell in cells:
        wanted = cell["overrides"] | on
        source = next((c["name"] for c in cells if c["overrides"] == wanted), cell["name"])
        if source != cell["name"]:
            out[cell["name"]] = source
    return out


def sensitivity(search: CellSearch, grid: list[tuple[float, ...]], cap: float, higher: bool) -> float:
    """Wortsman et al.'s learning-rate sensitivity over `grid` (see the module docstring)."""
    sign = -1.0 if higher else 1.0
    finite = [sign * s for s in map(search.mean, search.points) if math.isfinite(s)]
    if not finite:
        return math.nan
    best = min(finite)
    capped = [min(sign * s, sign * cap) if math.isfinite(s) else sign * cap for s in map(search.mean, grid)]
    return sum(c - best for c in capped) / len(capped)


def seed_range(search: CellSearch, grid: list[tuple[float, ...]], cap: float, higher: bool) -> str:
    """` (seeds a–b)`: the sensitivity of each tune seed's own search, lowest and highest, when the search ran
    several seeds (a sensitivity claim needs its noise); '' with one, or while a point lacks a seed's value."""
    seeds = {len(v) for v in search.points.values()}
    seeds = seeds.pop() if len(seeds) == 1 else 0
    if seeds < 2:
        return ""
    each = [sensitivity(CellSearch(search.cell, {p: [v[k]] for p, v in search.points.items()}), grid, cap, higher)
            for k in range(seeds)]  # fmt: skip
    return f" (seeds {fixed(min(each))}–{fixed(max(each))})"


def initial_grid(info: dict[str, Any], keys: list[str]) -> list[tuple[float, ...]]:
    """Every point of the initial grid (the range every cell searched), from `sweep.json`'s `tune`."""
    return list(itertools.product(*([float(v) for v in info["tune"]["grid"][k]] for k in keys)))


def sensitivity_cap(found: dict[str, CellSearch], higher: bool) -> float:
    """The worst finite mean any cell's search reached: one cap, so sensitivities compare across cells."""
    finite = [s.mean(p) for s in found.values() for p in s.points if math.isfinite(s.mean(p))]
    return (min if higher else max)(finite) if finite else math.nan


def tuning_section(out_dir: Path, ledger: Ledger, info: dict[str, Any]) -> tuple[str, list[tuple[str, Path]]]:
    """The report's `## Tuning` section and its sensitivity figures (caption, path relative to `out_dir`)."""
    keys, metric, found = searches(ledger, info)
    higher = higher_is_better(metric)
    grid, cap = initial_grid(info, keys), sensitivity_cap(found, higher)
    head = ["cell", *(f"chosen `{k}`" for k in keys), "searched", f"{metric} at chosen", "sensitivity", "bracketed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    shared = counterparts(info)
    for search in found.values():
        chosen = [format_value(v) for v in search.chosen] if search.chosen else ["—"] * len(keys)
        points = ", ".join(
            f"{'/'.join(format_value(v) for v in p)}: {fixed(search.mean(p))}" for p in sorted(search.points)
        )
        at_chosen = fixed(search.mean(search.chosen)) if search.chosen else "n/a"
        unbracketed = search.unbracketed(keys)
        bracketed = (
            "search not finished"
            if search.chosen is None
            else (f"**unbracketed** ({', '.join(unbracketed)})" if unbracketed else "yes")
        )
        # a point not yet run is not a diverged one: no sensitivity while the cell searches
        spread = (
            "n/a"
            if search.chosen is None
            else fixed(sensitivity(search, grid, cap, higher)) + seed_range(search, grid, cap, higher)
        )
        if search.cell in shared:  # `search_on`, `transfer`: it ran at the point its counterpart's search chose
            points, at_chosen, spread, bracketed = f"on `{shared[search.cell]}`", "—", "—", "—"
        row = [f"`{search.cell}`", *chosen, points, at_chosen, spread, bracketed]
        lines.append("| " + " | ".join(row) + " |")
    seeds, search_on = info["tune"].get("seeds", []), info["tune"].get("search_on")
    shared_rule = f"; only the cells with {search_on} searched, the others ran at their counterpart's choice"
    shared_rule = shared_rule if search_on else ""
    if transfer := info["tune"].get("transfer"):  # a ladder tuned once: its check is in the Ladder section
        shared_rule += (f"; only the cells at size `{transfer['from']}` searched, the other sizes ran at their "
                        "counterpart's choice, transferred (Ladder: Transfer)")  # fmt: skip
    text = [
        "## Tuning",
        f"Each cell at its own values of {', '.join(f'`{k}`' for k in keys)}, selected on `{metric}` (mean over "
        f"tune seeds {seeds}); the cells are compared above on the test split at those values. Initial grid: "
        + "; ".join(f"`{k}` {[float(v) for v in info['tune']['grid'][k]]}" for k in keys)
        + f", extended at most {info['tune'].get('extend')} step(s) past either end while that end was open"
        + shared_rule
        + ". *Unbracketed*: the search's cap stopped it with an end still open (the chosen value at it, or the "
        "value there no worse than its neighbour): a better value may lie beyond, and a comparison touching the "
        "cell is inconclusive by rule. *Sensitivity* (learning-rate sensitivity, Wortsman et al. 2023): the mean "
        f"over the initial grid of min({metric}, cap) − the cell's best, cap = {fixed(cap)} (the worst finite value "
        "any cell reached; a diverged point counts as the cap); 0: equally good across the range; with several "
        "tune seeds, the range of each seed's own sensitivity follows.",
        "\n".join(lines),
    ]
    figures = []
    for i, key in enumerate(keys):
        path = Path("plots") / f"tuning_{key}.png"
        curves = {s.cell: _curve(s, i, keys) for s in found.values()}
        chosen = {s.cell: s.chosen[i] for s in found.values() if s.chosen}
        if plots.sensitivity_curves(curves, chosen, key, metric, out_dir / path):
            figures.append((f"{metric} against {key} (search runs; band: min–max over tune seeds; ● chosen)", path))
    return "\n\n".join(text), figures


def _curve(search: CellSearch, index: int, keys: list[str]) -> dict[float, list[float]]:
    """The metric against one key, the other keys held at the cell's chosen values (all points with one key)."""
    curve: dict[float, list[float]] = {}
    for point, values in search.points.items():
        if len(keys) > 1 and search.chosen and any(v != c for j, (v, c) in enumerate(zip(point, search.chosen))
                                                   if j != index):  # fmt: skip
            continue
        curve.setdefault(point[index], []).extend(values)
    return dict(sorted(curve.items()))
