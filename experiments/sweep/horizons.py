"""`horizons:` in a sweep spec: every cell at several training lengths, from one stable run and a decay branch each.

    horizons: [800, 3200, 12800]          # training steps; needs model.optim.schedule: wsd (or constant)

Under WSD the rate at a step depends on the step and the run's length alone, and every length holds the peak until
its own decay starts (`lit_modules.schedules`). So per cell and seed, the sweep trains one **stable** run: the
longest horizon's run, stopped at its decay start and saved at every horizon's decay start
(`lit_modules.branch_points.BranchPoints`); then per horizon one **branch**: that horizon's run, resumed from the
stable run's state at its decay start (weights, optimizer, step, data position, generators), decaying to its end.
A branch trains what the same run from scratch would have, value for value (tests/experiments/sweep/
test_horizons_branch.py), at the cost of its decay alone.

The cells become `<cell>,horizon=<steps>` with `trainer.max_steps` the horizon (an axis of the ledger and of the
report's comparisons, like a ladder's size); the stable run is `<cell>,horizon=<longest>~stable/seed<k>`. Ledger
rows carry their `phase` (stable, branch), a branch its `horizon` and its `parent` (the stable run). A branch
starts once its stable run is done; one whose stable run failed, or diverged before the branch's decay start, is
recorded as such (`failed`, `diverged`) and not run: `--retry-failed` runs a failed stable run again, then its
branches. A branch resumes from its own checkpoints like any run; two sweeps sharing the folder claim each run once.
The report adds the budget axis (`experiments.analysis.horizons_report`). With `tune:`, each (cell, horizon) is
tuned on its own, a searched point one stable run with its branches (`experiments.sweep.tuned_branches`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from experiments.records.ledger import SEARCH_MARK, STABLE_PHASE
from experiments.sweep.ladder import HasOverrides
from experiments.sweep.spec_error import SpecError
from experiments.sweep.tuning import Tune

HORIZON_KEY = "trainer.max_steps"  # what a horizon sets: the axis of the ledger
HORIZON_LABEL = "horizon"  # a horizon cell's name: `<cell>,horizon=<steps>`
BRANCHING_SCHEDULES = ("wsd", "constant")  # the schedules whose rate until a run's decay start ignores its length
MIN_HORIZONS = 2

C = TypeVar("C", bound=HasOverrides)


def parse_horizons(raw: Any, fixed_and_axes: tuple[str, ...], blocks: dict[str, bool]) -> tuple[int, ...]:
    """The spec's `horizons:`, ascending; () without one.

    Args:
        raw: the block as read: a list of training lengths in steps.
        fixed_and_axes: keys the spec fixes or varies (`trainer.max_steps` cannot be one: each horizon sets it).
        blocks: which of the spec's other blocks are present (`ladder`: not combined with horizons yet).
    """
    if raw is None:
        return ()
    if (
        not isinstance(raw, list)
        or len(raw) < MIN_HORIZONS
        or not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in raw)
    ):
        raise SpecError(f"horizons: needs a list of at least {MIN_HORIZONS} training lengths in steps (e.g. [800, "
                        f"3200, 12800]), got {raw!r}")  # fmt: skip
    if len(set(raw)) != len(raw):
        raise SpecError(f"horizons: {raw} repeats a length")
    if HORIZON_KEY in fixed_and_axes:
        raise SpecError(f"horizons: each horizon sets {HORIZON_KEY}; drop it from fixed and the cells")
    for block, present in blocks.items():
        if present:
            raise SpecError(f"horizons: not combined with `{block}:` yet; run the horizons in a spec without it (e.g. "
                            f"fix the values a tuned sweep chose)")  # fmt: skip
    return tuple(sorted(raw))


# what sets where a branch leaves its stable run: a tuned key cannot move it (a cell's decay starts are resolved
# once, at the grid's first point, and every point's stable run saves and its branches resume at those steps)
BRANCH_START_KEYS = ("model.optim.schedule", "model.optim.warmup_steps", "model.optim.decay_fraction")


def check_tuned_horizons(tune: Tune) -> str | None:
    """Why `tune:` cannot go with `horizons:` as written (a one-line error), or None."""
    if tune.transfer or tune.search_on:
        return "horizons: with tune: searches every cell at every horizon; tune.transfer and tune.search_on are not "\
               "combined with horizons yet"  # fmt: skip
    moved = [key for key in tune.names if key in BRANCH_START_KEYS]
    if moved:
        return f"horizons: tune.grid's {moved} would move each point's decay start; tune the peak rate (e.g. "\
               "model.optim.lr) and fix the schedule's settings"  # fmt: skip
    return None


def horizon_name(cell: str, horizon: int) -> str:
    return f"{cell},{HORIZON_LABEL}={horizon}"


def stable_name(cell: str, horizons: Sequence[int]) -> str:
    """The stable run's folder (and ledger cell): the longest horizon's cell, `~stable` (its base cell is that one)."""
    return f"{horizon_name(cell, max(horizons))}{SEARCH_MARK}{STABLE_PHASE}"


def at_horizons(cells: Sequence[C], horizons: Sequence[int], make: Callable[[str, dict[str, Any]], C]) -> list[C]:
    """Every cell at every horizon, horizon by horizon: `make(name, overrides)` of `<cell>,horizon=<steps>`."""
    return [make(horizon_name(c.name, h), c.overrides | {HORIZON_KEY: h}) for h in horizons for c in cells]


def horizons_baseline(value: Any, cells: Sequence[HasOverrides], horizons: Sequence[int]) -> Any:
    """A spec's `baseline:` names a cell (or its values) before the horizons: it means that cell at the shortest
    horizon, where the report's per-horizon comparisons start (`compare_within` the horizon)."""
    if isinstance(value, str):
        if value not in {c.name for c in cells}:
            raise SpecError(f"baseline: no cell named {value!r}; cells: {[c.name for c in cells]}")
        return horizon_name(value, horizons[0])
    if isinstance(value, dict):
        return value | {HORIZON_KEY: horizons[0]}
    return horizon_name(cells[0].name, horizons[0]) if value is None else value


@dataclass(frozen=True)
class Horizons:
    """A parsed `horizons:`: the lengths, ascending, and the spec's cells (before the horizons) each at every one."""

    steps: tuple[int, ...]
    cells: tuple[str, ...]

    @property
    def longest(self) -> int:
        return self.steps[-1]

    def stable(self, cell: str) -> str:
        return stable_name(cell, self.steps)

    def snapshot(self) -> dict[str, Any]:
        """What `sweep.json` keeps for the report: the lengths, each horizon cell's (cell, horizon) and each cell's
        stable run (`same_sweep.sweep_info` adds each horizon cell's decay start)."""
        return {
            "steps": list(self.steps),
            "cells": {horizon_name(c, h): [c, h] for h in self.steps for c in self.cells},
            "stable": {self.stable(c): c for c in self.cells},
        }

    def describe(self) -> str:
        """The plan in one sentence, for `--dry-run`."""
        return (
            f"per cell and seed, one stable run to the decay start of {self.longest} steps, saved at each horizon's "
            f"decay start, then a decay branch to each of {list(self.steps)} from its checkpoint"
        )
