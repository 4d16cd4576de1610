"""`ladder:` in a sweep spec: every cell trained at every size of a model ladder (issue: does the ranking hold
as the model grows?).

    ladder:
      - {name: d64, model.arch.d_model: 64, model.arch.n_heads: 2, model.arch.d_ff: 256}
      - {name: d128, model.arch.d_model: 128, model.arch.n_heads: 4, model.arch.d_ff: 512, trainer.max_steps: 2000}

Each size (a rung) is a set of overrides with the same keys at every rung (width, depth, heads, `d_ff`, and
optionally the step budget or batch). The sweep's cells become the product of its cells and the rungs:
`<cell>,size=<rung>` with the cell's overrides and the rung's; the rung keys become axes of the ledger, so a
ladder resumes, claims runs and tunes (per cell and size, with `tune:`; or once, at one size, with
`tune.transfer`: `experiments.sweep.transfer`) like any sweep. The report fits each cell's final metric against
its runs' own parameter and FLOP counts (`experiments.analysis.ladder_fit`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from experiments.sweep.spec_error import SpecError

SIZE_LABEL = "size"  # a ladder cell's name: `<cell>,size=<rung>`
MIN_RUNGS = 2


class HasOverrides(Protocol):  # a spec's Cell (experiments.sweep.spec imports this module)
    name: str
    overrides: dict[str, Any]


C = TypeVar("C", bound=HasOverrides)


@dataclass(frozen=True)
class Rung:
    """One size of the ladder: its name and the overrides that make it."""

    name: str
    overrides: dict[str, Any]


def parse_ladder(raw: Any, fixed_and_axes: tuple[str, ...]) -> tuple[Rung, ...]:
    """The spec's `ladder:` block, checked; () without one.

    Args:
        raw: the block as read: a list of mappings, each a `name` and the rung's overrides.
        fixed_and_axes: keys the spec fixes or varies: a rung key cannot be one of them.
    """
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) < MIN_RUNGS or not all(isinstance(r, Mapping) for r in raw):
        raise SpecError(f"ladder: needs a list of at least {MIN_RUNGS} sizes, each a mapping of overrides, got {raw!r}")
    rungs = []
    for i, entry in enumerate(raw):
        overrides = dict(entry)
        name = overrides.pop("name", None)
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9._+-]+", name):
            raise SpecError(f"ladder[{i}]: needs a `name:` of letters, digits and ._+- (e.g. d128), got {name!r}")
        if not overrides:
            raise SpecError(f"ladder[{i}] ({name}): needs at least one override (e.g. model.arch.d_model)")
        rungs.append(Rung(name, overrides))
    keys = list(rungs[0].overrides)
    for rung in rungs:
        if set(rung.overrides) != set(keys):
            raise SpecError(
                f"ladder: every size sets the same keys; {rung.name} sets {list(rung.overrides)}, not {keys}"
            )
    clash = [k for k in keys if k in fixed_and_axes]
    if clash:
        raise SpecError(f"ladder: key(s) {clash} are also fixed or varied; keep each in one place")
    names = [r.name for r in rungs]
    if len(set(names)) != len(names):
        raise SpecError(f"ladder: size names repeat: {names}")
    return tuple(rungs)


def ladder_keys(rungs: tuple[Rung, ...]) -> tuple[str, ...]:
    return tuple(rungs[0].overrides) if rungs else ()


def ladder_name(cell: str, rung: str) -> str:
    return f"{cell},{SIZE_LABEL}={rung}"


def climb(cells: Sequence[C], rungs: tuple[Rung, ...], make: Callable[[str, dict[str, Any]], C]) -> list[C]:
    """Every cell at every rung, rung by rung: `make(name, overrides)` of `<cell>,size=<rung>`."""
    return [make(ladder_name(c.name, r.name), c.overrides | r.overrides) for r in rungs for c in cells]


@dataclass(frozen=True)
class Ladder:
    """A parsed `ladder:`: its sizes, and the spec's cells (before the ladder) each trained at every size."""

    rungs: tuple[Rung, ...]
    cells: tuple[str, ...]

    @property
    def keys(self) -> tuple[str, ...]:
        return ladder_keys(self.rungs)

    def snapshot(self) -> dict[str, Any]:
        """What `sweep.json` keeps for the report: the rungs, and each ladder cell's (cell, rung)."""
        return {
            "sizes": [{"name": r.name, "overrides": r.overrides} for r in self.rungs],
            "cells": {ladder_name(c, r.name): [c, r.name] for r in self.rungs for c in self.cells},
        }


def ladder_baseline(value: Any, cells: Sequence[HasOverrides], rungs: tuple[Rung, ...]) -> Any:
    """A spec's `baseline:` names a cell (or its values) before the ladder: it means that cell at the first
    size, where the report's per-size comparisons start (`compare_within` the rung keys)."""
    if isinstance(value, str):
        if value not in {c.name for c in cells}:
            raise SpecError(f"baseline: no cell named {value!r}; cells: {[c.name for c in cells]}")
        return ladder_name(value, rungs[0].name)
    if isinstance(value, Mapping):
        return dict(value) | rungs[0].overrides
    return ladder_name(cells[0].name, rungs[0].name) if value is None else value
