"""`tune:` in a sweep spec: every cell at its own tuned value of one or more keys, chosen on validation.

    tune:
      grid: {optim.lr: [1.0e-3, 3.0e-3, 1.0e-2]}   # log-spaced, at least two values per key
      extend: 4            # at most this many steps past either end of a key's initial grid (default 4)
      metric: val/loss     # what selects, on the validation split (default val/loss)
      seeds: [0]           # the seeds of every search point (default: the spec's first seed)
      search_on: {data.split: simple}   # optional: only the cells with these grid values search; each other
                                        # cell runs at the point its counterpart (itself with these values) chose
      transfer: {from: d64}   # a ladder only: search at one size, carry the choice to the others, verify it at
                              # the largest (experiments/sweep/transfer.py)

A tuned sweep runs in two phases per cell. The search trains each point of the grid (the product of
the keys' values) at `tune.seeds`; a key's range is bracketed on a side when, along that key through the best
point (mean of the selection metric over those seeds; a diverged or failed run counts as the worst), the edge
point diverged or is worse than its inner neighbour (a failed run, a crash rather than a result, closes no
side). Until both sides are, that key's values extend one step past the open side (the grid's own ratio) and
the new points run, up to `extend` steps a side (default 4; the key is then reported `unbracketed`, and a
comparison touching the cell is inconclusive by rule). The final phase trains the cell's `seeds` at the chosen
point; each final run is then evaluated on the data's held-out test split, which is what the report compares.

Which points a cell needs is a pure function of the results so far (`search`), so a sweep killed in
any phase and started again, or two sweeps sharing the folder, compute the same points from the ledger.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from contract.metrics import VALIDATION_PREFIXES, higher_is_better, metric_base_name
from experiments.sweep.ladder import HasOverrides

if TYPE_CHECKING:
    from experiments.sweep.transfer import Transfer

TUNE_KEYS = ("grid", "extend", "metric", "seeds", "search_on", "transfer")
DEFAULT_EXTEND = 4  # steps a side: `extend: 1` let searches stop one step past an edge, still improving
# a point's score when a run of it failed (crashed, not diverged): the worst for the choice, like a divergence,
# but it says nothing of the edge it sits on, so it closes no bracket (no metric is ever -inf)
FAILED_SCORE = -math.inf
Point = tuple[float, ...]  # one value per tuned key, in the order of `Tune.keys`


class TuneError(ValueError):
    """A `tune:` block that cannot run."""


def _rounded(value: float) -> float:
    """12 significant digits: 3e-3 × 3 is 0.009, not 0.009000000000000001 (names and flags stay short)."""
    return float(f"{value:.12g}")


@dataclass(frozen=True)
class TunedKey:
    """One tuned key and its initial grid (ascending, log-spaced: each value the previous × `ratio`)."""

    key: str
    grid: tuple[float, ...]

    @property
    def ratio(self) -> float:
        return (self.grid[-1] / self.grid[0]) ** (1 / (len(self.grid) - 1))

    def values(self, below: int, above: int) -> tuple[float, ...]:
        """The initial grid with `below` steps added under it and `above` over it."""
        lower = tuple(_rounded(self.grid[0] / self.ratio**k) for k in range(below, 0, -1))
        upper = tuple(_rounded(self.grid[-1] * self.ratio**k) for k in range(1, above + 1))
        return lower + self.grid + upper


@dataclass(frozen=True)
class Tune:
    """A parsed `tune:` block (see the module docstring)."""

    keys: tuple[TunedKey, ...]
    extend: int
    metric: str
    seeds: tuple[int, ...]
    search_on: tuple[tuple[str, Any], ...] = ()  # grid key -> value: the cells whose search the others share
    transfer: Transfer | None = None  # a ladder's search at one size, carried to the others (`spec.load_spec` sets it)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.key for k in self.keys)

    def overrides(self, point: Point) -> dict[str, float]:
        return dict(zip(self.names, point))

    def snapshot(self) -> dict[str, Any]:
        """What `sweep.json` keeps of it (the report reads the keys and the metric)."""
        grid = {k.key: list(k.grid) for k in self.keys}
        out = {"grid": grid, "extend": self.extend, "metric": self.metric, "seeds": list(self.seeds)}
        out |= {"search_on": dict(self.search_on)} if self.search_on else {}  # only when set: older files match
        return out | ({"transfer": self.transfer.snapshot()} if self.transfer else {})


def parse_tune(raw: Any, seeds: tuple[int, ...], fixed_and_axes: tuple[str, ...]) -> Tune | None:
    """The spec's `tune:` block, checked; None without one. Its `transfer:` needs the ladder: `load_spec` adds it
    (`experiments.sweep.transfer.parse_transfer`).

    Args:
        raw: the block as read.
        seeds: the spec's seeds (the default search seed is the first).
        fixed_and_axes: keys the spec fixes or varies: a tuned key cannot be one of them.
    """
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or "grid" not in raw:
        raise TuneError(f"tune: needs a mapping with a `grid:` of keys to values, got {raw!r}")
    unknown = [k for k in raw if k not in TUNE_KEYS]
    if unknown:
        raise TuneError(f"tune: unknown key(s) {unknown}; valid keys: {list(TUNE_KEYS)}")
    grid = raw["grid"]
    if not isinstance(grid, Mapping) or not grid:
        raise TuneError(f"tune.grid: needs a mapping of dotted CLI keys to lists of values, got {grid!r}")
    keys = []
    for key, values in grid.items():
        numbers = isinstance(values, list) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values
        )
        if not numbers or len(values) < 2 or sorted(set(values)) != list(values):
            raise TuneError(f"tune.grid.{key}: needs at least two positive numbers in ascending order, got {values!r}")
        ratios = [b / a for a, b in zip(values, values[1:])]
        if max(ratios) / min(ratios) > 1.25:  # 1e-3, 3e-3, 1e-2 passes: extension steps by their mean ratio
            raise TuneError(f"tune.grid.{key}: {values} is not log-spaced (ratios {[f'{r:.3g}' for r in ratios]})")
        if key in fixed_and_axes:
            raise TuneError(f"tune.grid.{key}: the spec also fixes or varies {key!r}; keep each key in one place")
        keys.append(TunedKey(key, tuple(float(v) for v in values)))
    extend = raw.get("extend", DEFAULT_EXTEND)
    if isinstance(extend, bool) or not isinstance(extend, int) or extend < 0:
        raise TuneError(f"tune.extend: needs a number of steps (0 or more), got {extend!r}")
    metric = raw.get("metric", "val/loss")
    if not isinstance(metric, str) or not metric.startswith(VALIDATION_PREFIXES):
        raise TuneError(f"tune.metric: selection is on validation: needs a val/* (or val_avg/*) metric, got {metric!r}")
    try:
        metric_base_name(metric)
    except KeyError as err:
        raise TuneError(f"tune.metric: {err.args[0]}") from None
    tune_seeds = raw.get("seeds", [seeds[0]])
    if not isinstance(tune_seeds, list) or not tune_seeds or not all(isinstance(s, int) and s >= 0 for s in tune_seeds):
        raise TuneError(f"tune.seeds: needs a non-empty list of non-negative integers, got {tune_seeds!r}")
    on = raw.get("search_on", {})
    if not isinstance(on, Mapping) or not all(isinstance(k, str) for k in on):
        raise TuneError(f"tune.search_on: needs a mapping of grid keys to one of their values, got {on!r}")
    return Tune(tuple(keys), extend, metric, tuple(tune_seeds), tuple(on.items()))


def check_search_on(tune: Tune, axes: tuple[str, ...], cells: Sequence[HasOverrides]) -> None:
    """`tune.search_on` names varied keys, and every cell has a counterpart with those values to share."""
    for key, value in tune.search_on:
        values = list(dict.fromkeys(c.overrides.get(key) for c in cells))
        if key not in axes or value not in values:
            varied = {k: list(dict.fromkeys(c.overrides.get(k) for c in cells)) for k in axes}
            raise TuneError(f"tune.search_on: {key}={value!r} is not a value of a varied key; the spec varies {varied}")
    for cell in cells:
        wanted = cell.overrides | dict(tune.search_on)
        if not any(c.overrides == wanted for c in cells):
            raise TuneError(
                f"tune.search_on: cell {cell.name!r} has no counterpart with {dict(tune.search_on)} whose search "
                "it could share; add that cell, or drop tune.search_on"
            )


@dataclass(frozen=True)
class SearchState:
    """Where one cell's search stands.

    Args:
        points: every point the search has asked for so far, in grid order.
        pending: those still without a result.
        chosen: the best point, once no point is pending and no key extends; None before.
        unbracketed: keys still open on a side when the `extend` cap stopped the search (the best at that end, or
            the end point no worse than its neighbour, or failed).
    """

    points: tuple[Point, ...]
    pending: tuple[Point, ...]
    chosen: Point | None
    unbracketed: tuple[str, ...] = ()


def search(tune: Tune, score: Callable[[Point], float | None]) -> SearchState:
    """The points a cell's search needs given the results so far, and its choice once it has one.

    Args:
        tune: the block.
        score: a point's mean selection metric over `tune.seeds`; None while a run of it has not ended;
            nan when a run diverged (the worst), `FAILED_SCORE` when one failed (the worst, closing no side).
    """
    higher = higher_is_better(tune.metric)
    steps = {key.key: [0, 0] for key in tune.keys}  # steps added [below, above] each key's initial grid
    while True:
        values = [key.values(*steps[key.key]) for key in tune.keys]
        points = tuple(itertools.product(*values))
        scores = {point: score(point) for point in points}
        pending = tuple(p for p, s in scores.items() if s is None)
        if pending:
            return SearchState(points, pending, None)
        finite = [p for p in points if math.isfinite(scores[p])]
        if not finite:  # every point diverged or failed: nothing to choose, nothing to extend towards
            return SearchState(points, (), None, tune.names)
        best = (max if higher else min)(finite, key=lambda p: scores[p])  # the first of equals, in grid order
        grew, capped = False, []
        for i, key in enumerate(tune.keys):
            for side, (edge, inner) in ((0, values[i][:2]), (1, values[i][:-3:-1])):
                if _bracketed(scores, best, i, edge, inner, higher):
                    continue
                if steps[key.key][side] < tune.extend:
                    steps[key.key][side] += 1
                    grew = True
                else:
                    capped.append(key.key)
        if not grew:
            return SearchState(points, (), best, tuple(dict.fromkeys(capped)))


def _bracketed(scores: Mapping[Point, float], best: Point, i: int, edge: float, inner: float, higher: bool) -> bool:
    """Whether key `i`'s range is closed on the side ending at `edge`: along the key through the best point, the
    edge point diverged or is worse than its inner neighbour (a curve still falling towards the edge is not, nor is
    an edge or neighbour that failed: a crash is no result)."""
    at_edge, next_in = scores[best[:i] + (edge,) + best[i + 1 :]], scores[best[:i] + (inner,) + best[i + 1 :]]
    if best[i] == edge or at_edge == FAILED_SCORE:
        return False
    if not math.isfinite(at_edge):  # diverged
        return True
    if next_in == FAILED_SCORE:
        return False
    return at_edge < next_in if higher else at_edge > next_in


def initial_points(tune: Tune) -> tuple[Point, ...]:
    """The points every cell's search starts with (what `--dry-run` lists)."""
    return tuple(itertools.product(*(key.grid for key in tune.keys)))


def extension_rule(tune: Tune) -> str:
    """The bracketing rule in one sentence, for `--dry-run`."""
    keys = ", ".join(f"{k.key} ×{k.ratio:.3g}" for k in tune.keys)
    shared = f"; only the cells with {dict(tune.search_on)} search, the others run at their counterpart's choice"
    shared = shared if tune.search_on else ""
    transfer = f"; {tune.transfer.describe()}" if tune.transfer else ""
    rule = (
        f"selection on {tune.metric} (mean over tune seeds {list(tune.seeds)}); while the best point is at the lowest "
        f"or highest value of a key, or the edge point there is no worse than its neighbour or failed, that key "
        f"extends one step past it ({keys}), at most {tune.extend} step(s) per side; a key still open is reported "
        "unbracketed; then the cell's seeds run at the chosen point"
    )
    return rule + shared + transfer
