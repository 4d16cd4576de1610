"""One folder, one sweep: a sweep resumed in a folder must be the sweep that started there.

`sweep.json` keeps the spec as it ran (`Spec.snapshot`) and, in each cell's entry, the cell's resolved
config (`resolved`: what the suite's parser made of the base configs, `fixed` and the cell's overrides).
Two sweeps are the same when each cell they share resolves to the same config, however their specs spell
it: a spec refactored into shared base configs, or rid of a value it restated, resumes its folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experiments.records.layout import SWEEP_INFO
from experiments.sweep.spec import ROOT, Spec, SpecError
from experiments.sweep.validate import CheckedCell, config_args, parse, resolved_config

RESOLVED = "resolved"  # the key of a cell's resolved config in its `sweep.json` entry
SHOWN_DIFFERENCES = 3  # keys named per changed cell


def sweep_info(spec: Spec, checked: dict[str, CheckedCell]) -> dict[str, Any]:
    """What `sweep.json` keeps: the spec's snapshot, each cell with its resolved config.

    Args:
        spec: the sweep.
        checked: its cells as `experiments.sweep.validate.check_spec` parsed them.
    """
    info = spec.snapshot()
    info["cells"] = [cell | {RESOLVED: checked[cell["name"]].resolved} for cell in info["cells"]]
    if spec.horizons:  # where each horizon's branch leaves the stable run (what the report's cost reads)
        info["horizons"]["starts"] = {name: checked[name].branch_start for name in info["horizons"]["cells"]}
    return info


def snapshot_of(info: dict[str, Any]) -> dict[str, Any]:
    """A `sweep.json` without what `sweep_info` resolved (each cell's config, each branch's start step): the spec's
    snapshot as the sweep ran it."""
    out = info | {"cells": [{k: v for k, v in cell.items() if k != RESOLVED} for cell in info["cells"]]}
    if info.get("horizons"):
        out["horizons"] = {k: v for k, v in info["horizons"].items() if k != "starts"}
    return out


def check_same_sweep(out_dir: Path, spec: Spec, checked: dict[str, CheckedCell]) -> None:
    """Refuses to mix two different sweeps in one folder: a resumed sweep must be the same sweep
    (more seeds or cells are fine; changed settings of existing runs are not).

    The cells both sweeps have are compared by their resolved configs. An older `sweep.json` keeps
    none: there the spec as written is compared (base, fixed, each cell's overrides), and where that
    differs, what the old spec's arguments resolve to now.

    Args:
        out_dir: the sweep folder.
        spec: the sweep about to run there.
        checked: its cells as `experiments.sweep.validate.check_spec` parsed them.

    Raises:
        SpecError: naming what differs.
    """
    path = out_dir / SWEEP_INFO
    if not path.exists():
        return
    old, new = json.loads(path.read_text()), sweep_info(spec, checked)
    # checkpoints, a tuned sweep's search (its grid, cap, metric, seeds: which points run) and the horizons (where
    # the stable runs stop and save) must not move
    changed = []
    if old.get("checkpoint_every") != new.get("checkpoint_every"):
        changed.append(f"checkpoint_every ({old.get('checkpoint_every')} -> {new.get('checkpoint_every')})")
    if old.get("tune") != new.get("tune"):
        changed.append("tune")
    if (old.get("horizons") or {}).get("steps") != (new.get("horizons") or {}).get("steps"):
        changed.append("horizons")
    old_cells = {c["name"]: c for c in old.get("cells", [])}
    shared = {c["name"]: c for c in new["cells"] if c["name"] in old_cells}
    if all(RESOLVED in cell for cell in old_cells.values()):
        changed += _changed_cells({name: old_cells[name][RESOLVED] for name in shared}, shared)
        changed += _changed_settings(list(old_cells.values()), new["cells"])
    else:
        changed += _changed_spec(old, new, shared)
    if changed:
        raise SpecError(
            f"{out_dir} holds a sweep with different {', '.join(changed)} (see {path}); "
            "use another --out, or delete the folder to start over"
        )


def _changed_cells(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> list[str]:
    """`cell NAME (key: old -> new, ...)` for each cell whose resolved config differs in a key both have.

    A key only one side has is an argument the code gained or lost between the two parses, not a
    setting of the spec: the runs' own commits record the code (`experiments.sweep.provenance`)."""
    changed = []
    for name, cell in new.items():
        before, after = _flat(old[name]), _flat(cell[RESOLVED])
        keys = [k for k in after if k in before and before[k] != after[k]]
        if keys:
            changed.append(f"cell {name} ({_differences(before, after, keys)})")
    return changed


def _changed_settings(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    """`every cell's KEY (old -> new)` for each setting that no cell of either sweep overrides, that every cell of
    each sweep shares, and that the two sweeps set differently: added cells must be run as the folder's were, even
    when no cell name is shared (a different spec pointed at the folder)."""
    axes = {_resolved_key(key) for cell in old + new for key in cell["overrides"]}
    before, after = _shared(c[RESOLVED] for c in old), _shared(c[RESOLVED] for c in new)
    keys = [k for k in after if k in before and k not in axes and before[k] != after[k]]
    return [f"settings of every cell ({_differences(before, after, keys)})"] if keys else []


def _differences(before: dict[str, Any], after: dict[str, Any], keys: list[str]) -> str:
    """`key: old -> new; ...` for the first SHOWN_DIFFERENCES keys, then how many more."""
    shown = [f"{k}: {before[k]!r} -> {after[k]!r}" for k in keys[:SHOWN_DIFFERENCES]]
    more = f", {len(keys) - SHOWN_DIFFERENCES} more" if len(keys) > SHOWN_DIFFERENCES else ""
    return "; ".join(shown) + more


def _shared(configs) -> dict[str, Any]:
    """The flat keys every config sets to one value, with that value."""
    flats = [_flat(config) for config in configs]
    if not flats:
        return {}
    return {k: v for k, v in flats[0].items() if all(k in f and f[k] == v for f in flats[1:])}


def _resolved_key(override: str) -> str:
    """A spec's `model.arch.d_model` as the resolved config spells it, `model.init_args.arch.d_model`."""
    head, _, rest = override.partition(".")
    return f"{head}.init_args.{rest}" if head in ("model", "data") and rest and rest != "class_path" else override


def _changed_spec(old: dict[str, Any], new: dict[str, Any], shared: dict[str, dict[str, Any]]) -> list[str]:
    """An older `sweep.json` (no resolved configs): the spec as written, else its arguments resolved now."""
    changed = [key for key in ("base", "fixed") if old.get(key) != new[key]]
    old_cells = {c["name"]: c for c in old.get("cells", [])}
    changed += [f"cell {name}" for name, cell in shared.items() if old_cells[name]["overrides"] != cell["overrides"]]
    if not changed:
        return []
    base, fixed = old.get("base") or [], old.get("fixed") or {}
    resolved = {}
    for name in shared:
        try:
            resolved[name] = resolved_config(parse(config_args(base, fixed, old_cells[name]["overrides"], ROOT)))
        except SpecError:  # the old base configs are gone, or their values no longer parse
            return changed
    return _changed_cells(resolved, shared)


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"model": {"init_args": {"arch": {...}}}}` as `{"model.init_args.arch.d_model": 128, ...}`."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat
