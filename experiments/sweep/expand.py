"""A checked spec's runs: every (cell, seed) as an ordinary `cli.py fit` command line (`runs.Run`).

Apart from `runs` because it needs the suite's parser (`validate`, which imports Lightning), and a
scheduler job that only runs a `Run` must not.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from contract.run_folder import DONE, FAILED, last_checkpoint
from experiments.records.ledger import (
    FINAL_PHASE,
    PHASE_COLUMN,
    SEARCH_MARK,
    SEARCH_PHASE,
    UNBRACKETED_COLUMN,
    VERIFY_PHASE,
    Ledger,
)
from experiments.records.values import format_value
from experiments.sweep.runs import Run
from experiments.sweep.spec import Spec
from experiments.sweep.spec_cells import Cell, cell_name, key_labels
from experiments.sweep.tuning import FAILED_SCORE, Point, SearchState, Tune, search
from experiments.sweep.validate import CheckedCell, cell_args, override_args


def run_args(spec: Spec, checked: CheckedCell, seed: int, run_dir: Path) -> list[str]:
    """A cell's arguments plus what makes the run a sweep member: its seed, log folder, checkpoints.

    Args:
        spec: the sweep.
        checked: the cell, as validated.
        seed: the run's seed; also given to the data's and model's own `seed` where they have one.
        run_dir: `DIR/<cell>/seed<k>`.
    """
    checkpoints = {
        "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
        "init_args": {
            "dirpath": str(last_checkpoint(run_dir).parent),
            "every_n_train_steps": spec.checkpoint_every,
            "save_last": True,
            "save_top_k": 0,  # only last.ckpt: resuming needs nothing else
        },
    }
    return [
        *cell_args(spec, checked.cell),
        f"--seed_everything={seed}",
        *(f"--{key}={seed}" for key in checked.seed_keys),
        # Lightning logs to save_dir/name/version; an empty version makes that exactly DIR/<cell>/seed<k>
        f"--trainer.logger.init_args.save_dir={run_dir.parent}",
        f"--trainer.logger.init_args.name={run_dir.name}",
        "--trainer.logger.init_args.version=",
        "--trainer.callbacks+=" + json.dumps(checkpoints, separators=(",", ":")),
    ]


def make_runs(spec: Spec, checked: dict[str, CheckedCell], out_dir: Path, threads: dict[str, int]) -> list[Run]:
    """Every (cell, seed), seed by seed, so a sweep cut short still compares all cells.

    Args:
        spec: the sweep.
        checked: the validated cells by name.
        out_dir: the sweep's folder (absolute).
        threads: torch threads of each process of a cell's runs, by cell name (see `experiments.sweep.resources`).
    """
    runs = []
    for seed in spec.seeds:
        for cell in spec.cells:
            run_dir = out_dir / cell.name / f"seed{seed}"
            args = tuple(run_args(spec, checked[cell.name], seed, run_dir))
            runs.append(Run(cell.name, seed, run_dir, args, threads[cell.name]))
    return runs


def search_cell_name(cell: str, tune: Tune, point: Point) -> str:
    """`<cell>~lr=0.003`: the folder (and ledger cell) of a cell's search runs at `point`."""
    labels = key_labels(list(tune.names))
    return f"{cell}{SEARCH_MARK}{cell_name(dict(zip(tune.names, point)), labels)}"


def point_score(ledger: Ledger, name: str, tune: Tune) -> float | None:
    """A search point's mean selection metric over `tune.seeds`: None while a run has no ledger row;
    `FAILED_SCORE` when one failed; nan when one diverged or logged no finite value (the worst, `tuning.search`)."""
    rows = [ledger.get(name, seed) for seed in tune.seeds]
    if any(row is None for row in rows):
        return None
    if any(row["status"] == FAILED for row in rows):
        return FAILED_SCORE
    values = [float(row.get(tune.metric) or "nan") if row["status"] == DONE else math.nan for row in rows]
    return sum(values) / len(values) if all(math.isfinite(v) for v in values) else math.nan


def tuned_runs(
    spec: Spec, checked: dict[str, CheckedCell], out_dir: Path, threads: dict[str, int], ledger: Ledger
) -> tuple[list[Run], dict[str, SearchState]]:
    """The runs a tuned sweep needs given its ledger: every search point each cell's search has asked for
    (`tuning.search`), then, for each cell whose search has chosen, its seeds at the chosen point,
    evaluated on the test split (with `tune.transfer`: the point transferred to the cell's size), and at a
    ladder's largest size the runs that verify it (`transfer.Transfer.verify_points`). Cells in spec order; a
    cell's final runs after its search runs.

    Returns:
        The runs, and each cell's search state.
    """
    tune = spec.tune
    assert tune is not None, "tuned_runs needs a spec with a tune: block"

    def run_at(cell: Cell, name: str, seed: int, point: Point, phase: str, open_keys: tuple[str, ...] = ()) -> Run:
        """`cell`'s run `name`/seed`seed` at `point`: a search run (`name` is `<cell>~<point>`) or a final one,
        which records the keys its search left unbracketed."""
        run_dir = out_dir / name / f"seed{seed}"
        args = (*run_args(spec, checked[cell.name], seed, run_dir), *override_args(tune.overrides(point)))
        columns = ((PHASE_COLUMN, phase), *((k, format_value(v)) for k, v in tune.overrides(point).items()))
        if phase == FINAL_PHASE:
            columns += ((UNBRACKETED_COLUMN, ",".join(open_keys)),)
        return Run(name, seed, run_dir, args, threads[cell.name], columns, evaluate=phase == FINAL_PHASE)

    states = {  # one search per searching cell; with `tune.search_on` the others share their counterpart's
        cell.name: search(tune, lambda point: point_score(ledger, search_cell_name(cell.name, tune, point), tune))
        for cell in spec.cells
        if spec.search_cell(cell) is cell
    }
    runs = []
    for cell in spec.cells:
        source = spec.search_cell(cell)
        state = states.setdefault(cell.name, states[source.name])
        if source is cell:
            for point in state.points:
                runs += [
                    run_at(cell, search_cell_name(cell.name, tune, point), s, point, SEARCH_PHASE) for s in tune.seeds
                ]
        if state.chosen is None:
            continue
        transfer, point = tune.transfer, state.chosen
        if transfer:  # a ladder's search at one size, carried to this one (`experiments.sweep.transfer`)
            point = transfer.scaled(tune.names, point, source.overrides, cell.overrides)
        runs += [run_at(cell, cell.name, seed, point, FINAL_PHASE, state.unbracketed) for seed in spec.seeds]
        if transfer and transfer.at_top(cell.overrides):  # ×1 at the tune seeds: the final runs, where they ran
            again = [s for s in tune.seeds if s not in spec.seeds]
            points = [(p, tune.seeds) for p in transfer.verify_points(point)] + ([(point, again)] if again else [])
            runs += [run_at(cell, search_cell_name(cell.name, tune, p), s, p, VERIFY_PHASE) for p, ss in points
                     for s in ss]  # fmt: skip
    return runs, states


def sweep_runs(
    spec: Spec, checked: dict[str, CheckedCell], out_dir: Path, threads: dict[str, int], ledger: Ledger
) -> list[Run]:
    """The runs the sweep needs now: every (cell, seed); for a tuned sweep, those its ledger calls for."""
    if spec.tune is None:
        return make_runs(spec, checked, out_dir, threads)
    return tuned_runs(spec, checked, out_dir, threads, ledger)[0]
