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
from typing import Any

from contract.run_folder import DIVERGED, DONE, FAILED, last_checkpoint, step_checkpoint
from experiments.records.ledger import (
    BRANCH_PHASE,
    HORIZON_COLUMN,
    PARENT_COLUMN,
    PHASE_COLUMN,
    SEARCH_MARK,
    STABLE_PHASE,
    Ledger,
)
from experiments.records.values import format_value
from experiments.sweep.expand import run_args
from experiments.sweep.horizons import horizon_name
from experiments.sweep.runs import Run
from experiments.sweep.spec import Spec
from experiments.sweep.validate import CheckedCell, override_args

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
        """Writes the blocked rows that changed and removes the stale ones (under the ledger's lock, and only over a
        blocked row or none: a sweep sharing the folder may have run the branch since this plan read the ledger)."""
        for row in self.blocked:
            recorded = ledger.get(row["cell"], int(row["seed"])) or {}
            if any(recorded.get(key, "") != value for key, value in row.items()):
                ledger.put(row, replaces=lambda now: now is None or is_blocked(now))
        for cell, seed in self.cleared:
            ledger.remove(cell, seed, when=is_blocked)


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


@dataclass(frozen=True)
class Branching:
    """One stable run and the branches a sweep needs of it.

    Args:
        cell: the cell before the horizons.
        seed: the seed of the stable run and its branches.
        horizons: the horizons whose branch runs (all of them, or those a tuned search or choice asks for).
        point: a tuned sweep's point: extra overrides of the stable run and its branches; () for none.
        tag: `~<point>` of a tuned sweep (the stable run's folder is `<cell>,horizon=<longest><tag>~stable`); ''.
        branch_tag: added to each branch's horizon cell (a search branch's `~<point>`; '' for a final branch).
        phase: the branches' ledger phase (`branch`; `search` or `final` in a tuned sweep).
        columns: more ledger columns of every branch (a tuned sweep's values, what its search left open).
        evaluate: evaluate each branch on the test split (a tuned sweep's final branches).
    """

    cell: str
    seed: int
    horizons: tuple[int, ...]
    point: dict[str, Any] = field(default_factory=dict)
    tag: str = ""
    branch_tag: str = ""
    phase: str = BRANCH_PHASE
    columns: tuple[tuple[str, str], ...] = ()
    evaluate: bool = False


def add_branching(
    plan: HorizonPlan,
    what: Branching,
    spec: Spec,
    checked: dict[str, CheckedCell],
    out_dir: Path,
    threads: dict[str, int],
    ledger: Ledger,
) -> None:
    """Adds `what`'s stable run to `plan` (once: a tuned sweep's search and final phases may share it), and once
    the ledger has it, each wanted branch from its checkpoint at the branch's decay start, or the blocked row."""
    horizons = spec.horizons
    assert horizons is not None, "add_branching needs a spec with horizons:"
    seed, point_args = what.seed, tuple(override_args(what.point))
    names = {h: horizon_name(what.cell, h) for h in horizons.steps}
    starts = {h: checked[name].branch_start for h, name in names.items()}
    stable = f"{names[horizons.longest]}{what.tag}{SEARCH_MARK}{STABLE_PHASE}"
    stable_dir = out_dir / stable / f"seed{seed}"
    point_columns = tuple((k, format_value(v)) for k, v in what.point.items())
    if not any(run.cell == stable and run.seed == seed for run in plan.runs):
        callback = {"class_path": BRANCH_POINTS, "init_args": {"dirpath": str(last_checkpoint(stable_dir).parent),
                                                               "steps": sorted(set(starts.values()))}}  # fmt: skip
        args = (*run_args(spec, checked[names[horizons.longest]], seed, stable_dir), *point_args,
                "--trainer.callbacks+=" + json.dumps(callback, separators=(",", ":")))  # fmt: skip
        columns = ((PHASE_COLUMN, STABLE_PHASE), (HORIZON_COLUMN, ""), (PARENT_COLUMN, ""), *point_columns)
        plan.runs.append(Run(stable, seed, stable_dir, args, threads[names[horizons.longest]], columns))
    parent = ledger.get(stable, seed)
    if parent is None:  # not ended yet: its branches wait
        return
    parent_name = f"{stable}/seed{seed}"
    for horizon in what.horizons:
        name, base = names[horizon] + what.branch_tag, names[horizon]
        run_dir = out_dir / name / f"seed{seed}"
        columns = ((PHASE_COLUMN, what.phase), (HORIZON_COLUMN, str(horizon)), (PARENT_COLUMN, parent_name),
                   *point_columns, *what.columns)  # fmt: skip
        why = _why_blocked(parent_name, parent, starts[horizon])
        own = ledger.get(name, seed)
        if why is None:
            if is_blocked(own):
                plan.cleared.append((name, seed))
            start = step_checkpoint(last_checkpoint(stable_dir).parent, starts[horizon])
            args = (*run_args(spec, checked[base], seed, run_dir), *point_args)
            plan.runs.append(Run(name, seed, run_dir, args, threads[base], columns, what.evaluate, start))
        elif own is None or is_blocked(own):
            status, error, step = why
            values = {k: format_value(v) for k, v in checked[base].axis_values.items()}
            plan.blocked.append({"cell": name, "seed": str(seed), "status": status, **values, **dict(columns),
                                 "diverged_at_step": step, "error": error})  # fmt: skip


def horizon_runs(
    spec: Spec, checked: dict[str, CheckedCell], out_dir: Path, threads: dict[str, int], ledger: Ledger
) -> HorizonPlan:
    """Seed by seed, each cell's stable run, then the branches of the stable runs the ledger has done (a tuned
    sweep: `experiments.sweep.tuned_branches`).

    Args:
        spec: the sweep (with `horizons:`).
        checked: the validated horizon cells by name (each with its `branch_start`).
        out_dir: the sweep's folder (absolute).
        threads: torch threads of each process of a cell's runs, by cell name.
        ledger: what the sweep has recorded.
    """
    horizons = spec.horizons
    assert horizons is not None, "horizon_runs needs a spec with horizons:"
    assert spec.tune is None, "a tuned sweep's horizons: experiments.sweep.tuned_branches"
    plan = HorizonPlan()
    for seed in spec.seeds:
        for cell in horizons.cells:
            add_branching(plan, Branching(cell, seed, horizons.steps), spec, checked, out_dir, threads, ledger)
    return plan
