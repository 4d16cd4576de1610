"""The sweep engine: a spec expanded into ordinary `cli.py fit` runs, launched, and kept in a ledger.

    from experiments.sweep import run_sweep
    outcome = run_sweep("experiments/demo.yaml", "runs/demo", jobs="auto")   # a SweepOutcome

The names below load on first use: the engine checks cells with the suite's parser (Lightning), and a
scheduler job that imports `experiments.sweep.task` must start without it.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "run_sweep": "engine", "plan_sweep": "engine", "SweepOutcome": "engine", "SweepPlan": "engine",
    "UNRECORDED": "engine", "Spec": "spec", "load_spec": "spec", "SpecError": "spec_error",
}  # fmt: skip
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
