"""A spec's cells: `grid:` (the product of the axes' values) or `cells:` (a list of overrides), their names,
and the `baseline:` they are compared with."""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from experiments.records.values import format_value
from experiments.sweep.spec_error import SpecError

# a value YAML gives a config key: what `--key=value` on the command line can carry
Value = str | int | float | bool | None | list["Value"] | dict[str, "Value"]
Overrides = dict[str, Value]  # dotted CLI key -> value
# set by the runner for every run; a spec that set them would be silently overridden
RESERVED_KEYS = ("seed_everything", "ckpt_path", "trainer.logger", "trainer.callbacks")


@dataclass(frozen=True)
class Cell:
    """One point of the comparison: a name and the CLI overrides that make it differ.

    Args:
        name: short, filesystem-safe, unique within the sweep (the folder of its runs).
        overrides: dotted CLI key -> value, on top of the spec's `fixed`.
    """

    name: str
    overrides: Overrides


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+=,-]+", "-", text) or "-"


def key_labels(keys: list[str]) -> dict[str, str]:
    """Shortest dotted suffix of each key that no other key ends with: `pos_encoding`, `optim.lr`."""
    labels = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            label = ".".join(parts[-n:])
            if not any(other != key and (other == label or other.endswith("." + label)) for other in keys):
                break
        labels[key] = label
    return labels


def cell_name(overrides: Mapping[str, Any], labels: Mapping[str, str]) -> str:
    """`pos_encoding=alibi,norm=rmsnorm`: readable, and safe as a folder name."""
    parts = []
    for key, value in overrides.items():
        shown = "-".join(format_value(v) for v in value) if isinstance(value, (list, tuple)) else format_value(value)
        parts.append(f"{labels[key]}={_safe(shown)}")
    return ",".join(parts) or "base"


def overrides(value: Any, what: str) -> Overrides:
    """A mapping of dotted CLI keys to values ({} for None); none of them set by the runner itself."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise SpecError(f"{what} must be a mapping of dotted CLI keys to values, got {value!r}")
    for key in value:
        if any(key == r or key.startswith(r + ".") for r in RESERVED_KEYS):
            raise SpecError(
                f"{what}: {key!r} is set by the sweep runner for every run; reserved: {list(RESERVED_KEYS)}"
            )
    return dict(value)


def expand(grid: Any, cells: Any) -> tuple[tuple[str, ...], list[Cell]]:
    """The axes (the keys the cells differ in) and the cells, in spec order, of a `grid:` or a `cells:`."""
    if (grid is None) == (cells is None):
        raise SpecError("a spec needs exactly one of `grid:` (axes -> values) or `cells:` (a list of overrides)")
    if grid is not None:
        grid = overrides(grid, "grid")
        if not grid:
            raise SpecError("grid: needs at least one axis")
        for key, values in grid.items():
            if not isinstance(values, list) or not values:
                raise SpecError(f"grid: axis {key!r} needs a non-empty list of values, got {values!r}")
        axes = tuple(grid)
        labels = key_labels(list(axes))
        combos = [dict(zip(axes, values)) for values in itertools.product(*grid.values())]
        return axes, [Cell(cell_name(o, labels), o) for o in combos]
    if not isinstance(cells, list) or not cells:
        raise SpecError(f"cells: needs a non-empty list of override mappings, got {cells!r}")
    entries = []
    for i, entry in enumerate(cells):
        entry = overrides(entry, f"cells[{i}]")
        name = entry.pop("name", None)
        if name is not None and (not isinstance(name, str) or _safe(name) != name or name[0] in "_-"):
            raise SpecError(
                f"cells[{i}]: name {name!r} must be filesystem-safe ([A-Za-z0-9._+=,-]) and not start with '_' or '-'"
            )
        entries.append((name, entry))
    axes = tuple(dict.fromkeys(k for _, o in entries for k in o))
    labels = key_labels(list(axes))
    return axes, [Cell(name or cell_name(o, labels), o) for name, o in entries]


def baseline_name(value: Any, cells: list[Cell]) -> str:
    """The cell `baseline:` names: by name, or by values it alone has; the first cell without one."""
    if value is None:
        return cells[0].name
    if isinstance(value, str):
        if value not in {c.name for c in cells}:
            raise SpecError(f"baseline: no cell named {value!r}; cells: {[c.name for c in cells]}")
        return value
    wanted = overrides(value, "baseline")
    matches = [
        c.name
        for c in cells
        if all(k in c.overrides and format_value(c.overrides[k]) == format_value(v) for k, v in wanted.items())
    ]
    if len(matches) != 1:
        found = "no cell" if not matches else f"several cells ({matches})"
        raise SpecError(f"baseline: {wanted} matches {found}; cells: {[c.name for c in cells]}")
    return matches[0]


def check_names(cells: list[Cell], reserved: str) -> None:
    names = [c.name for c in cells]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SpecError(f"cell names are not unique: {duplicates}; give the cells a `name:`")
    if reserved in names:
        raise SpecError(f"cell name {reserved!r} is reserved for the sweep's summary")


def seed_list(value: Any, what: str = "seeds") -> tuple[int, ...]:
    """A non-empty list of distinct non-negative integers."""
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)
    ):
        raise SpecError(f"{what}: needs a non-empty list of non-negative integers, got {value!r}")
    if len(set(value)) != len(value):
        raise SpecError(f"{what}: {value} repeats a seed")
    return tuple(value)
