"""One folder, one sweep: a sweep resumed in a folder must be the sweep that started there."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.records.layout import SWEEP_INFO
from experiments.sweep.spec import Spec, SpecError


def check_same_sweep(out_dir: Path, spec: Spec) -> None:
    """Refuses to mix two different sweeps in one folder: a resumed sweep must be the same sweep
    (more seeds or cells are fine; changed settings of existing runs are not)."""
    path = out_dir / SWEEP_INFO
    if not path.exists():
        return
    old, new = json.loads(path.read_text()), spec.snapshot()
    changed = [key for key in ("base", "fixed", "checkpoint_every") if old.get(key) != new[key]]
    old_cells = {c["name"]: c["overrides"] for c in old.get("cells", [])}
    changed += [f"cell {c['name']}" for c in new["cells"] if old_cells.get(c["name"], c["overrides"]) != c["overrides"]]
    if changed:
        raise SpecError(
            f"{out_dir} holds a sweep with different {', '.join(changed)} (see {path}); "
            "use another --out, or delete the folder to start over"
        )
