"""The runs a `horizons:` sweep needs given its ledger (`experiments.sweep.horizons`): per cell and seed its stable
run, and once that is done, a decay branch per horizon resumed from the stable run's checkpoint at the horizon's
decay start. A branch whose stable run failed, or diverged before the branch's decay start, is not a run: its row
says why (`HorizonPlan.blocked`), and goes once the stable run is done (`--retry-failed` runs a failed one again).

Which runs a sweep needs is a function of its ledger, so a sweep killed in either phase, or two sweeps sharing the
folder (which claim each run, `experiments.sweep.claims`), compute the same runs round after round.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from contract.run_folder import DIVERGED, DONE, FAILED, last_checkpoint, step_checkpoint
from experiments.records.ledger import (
    BRANCH_PHASE,
    HORIZON_COLUMN,
    PARENT_COLUMN,
    PHASE_COLUMN,
    STABLE_PHASE,
    Ledger,
)
from experiments.records.values import format_value
from experiments.sweep.expand import run_args
from experiments.sweep.horizons import horizon_name
from experiments.sweep.runs import Run
from experiments.sweep.spec import Spec
from experiments.sweep.validate import CheckedCell

BRANCH_POINTS = "lit_modules.branch_points.BranchPoints"  # the stable run's callback: saves, then ends training
BLOCKED = "parent "  # how a blocked branch's error begins


@dataclass
class HorizonPlan:
    """What a horizons sweep needs now.

    Args:
        runs: the runs to bring to an end (stable runs; the branches of the done ones).
        blocked: the rows of branches that cannot run (their parent failed, or diverged before their start).
        cleared: the branches whose blocked row is stale (their parent is done now): they run.
    """

    runs: list[Run] = field(default_factory=list)
    blocked: list[dict[str, str]] = field(default_factory=list)
    cleared: list[tuple[str, int]] = field(default_factory=list)

    def apply(self, ledger: Ledger) -> None:
        """Writes the blocked rows that changed and removes the stale ones (under the ledger's lock)."""
        for row in self.blocked:
            recorded = ledger.get(row["cell"], int(row["seed"])) or {}
            if any(recorded.get(key, "") != value for key, value in row.items()):
                ledger.put(row)
        for cell, seed in self.cleared:
            ledger.remove(cell, seed)


def is_blocked(row: dict[str, str] | None) -> bool:
    """A branch's row written because its parent could not give it a start (`HorizonPlan.blocked`)."""
    return bool(row) and row.get(PHASE_COLUMN) == BRANCH_PHASE and row.get("error", "").startswith(BLOCKED)


def _why_blocked(parent: str, row: dict[str, str], start: int) -> tuple[str, str, str] | None:
    """(status, error, diverged_at_step) of a branch starting at `start` whose parent ended as `row`; None when
    it can run. A parent that diverged after the start saved it: the branch runs (from scratch, the same run would
    have reached it); one that diverged at or before it means that run diverges there too."""
    status = row["status"]
    if status == DONE:
        return None
    if status == DIVERGED:
        try:
            at = int(float(row.get("diverged_at_step") or "nan"))
        except ValueError:
            at = None
        if at is not None and start < at:
            return None
        where = f"at step {at}" if at is not None else "at an unknown step"
        error = f"{BLOCKED}{parent} diverged {where}, before this horizon's decay start ({start})"
        return DIVERGED, error, "" if at is None else str(at)
    error = row.get("error") or "no error recorded"
    return FAILED, f"{BLOCKED}{parent} failed: {error}"[:500], ""


def horizon_runs(
    spec: Spec, checked: dict[str, CheckedCell], out_dir: Path, threads: dict[str, int], ledger: Ledger
) -> HorizonPlan:
    """Seed by seed, each cell's stable run, then the branches of the stable runs the ledger has done.

    Args:
        spec: the sweep (with `horizons:`).
        checked: the validated horizon cells by name (each with its `branch_start`).
        out_dir: the sweep's folder (absolute).
        threads: torch threads of each process of a cell's runs, by cell name.
        ledger: what the sweep has recorded.
    """
    horizons = spec.horizons
    assert horizons is not None, "horizon_runs needs a spec with horizons:"
    plan = HorizonPlan()
    for seed in spec.seeds:
        for cell in horizons.cells:
            names = {h: horizon_name(cell, h) for h in horizons.steps}
            starts = {h: checked[name].branch_start for h, name in names.items()}
            top, stable = names[horizons.longest], horizons.stable(cell)
            stable_dir = out_dir / stable / f"seed{seed}"
            callback = {"class_path": BRANCH_POINTS, "init_args": {"dirpath": str(last_checkpoint(stable_dir).parent),
                                                                   "steps": sorted(set(starts.values()))}}  # fmt: skip
            args = (*run_args(spec, checked[top], seed, stable_dir),
                    "--trainer.callbacks+=" + json.dumps(callback, separators=(",", ":")))  # fmt: skip
            columns = ((PHASE_COLUMN, STABLE_PHASE), (HORIZON_COLUMN, ""), (PARENT_COLUMN, ""))
            plan.runs.append(Run(stable, seed, stable_dir, args, threads[top], columns))
            parent = ledger.get(stable, seed)
            if parent is None:  # not ended yet: its branches wait
                continue
            for horizon, name in names.items():
                run_dir, parent_name = out_dir / name / f"seed{seed}", f"{stable}/seed{seed}"
                columns = ((PHASE_COLUMN, BRANCH_PHASE), (HORIZON_COLUMN, str(horizon)), (PARENT_COLUMN, parent_name))
                why = _why_blocked(parent_name, parent, starts[horizon])
                own = ledger.get(name, seed)
                if why is None:
                    if is_blocked(own):
                        plan.cleared.append((name, seed))
                    start = step_checkpoint(last_checkpoint(stable_dir).parent, starts[horizon])
                    args = tuple(run_args(spec, checked[name], seed, run_dir))
                    plan.runs.append(Run(name, seed, run_dir, args, threads[name], columns, start_from=start))
                elif own is None or is_blocked(own):
                    status, error, step = why
                    values = {k: format_value(v) for k, v in checked[name].axis_values.items()}
                    plan.blocked.append({"cell": name, "seed": str(seed), "status": status, **values, **dict(columns),
                                         "diverged_at_step": step, "error": error})  # fmt: skip
    return plan
