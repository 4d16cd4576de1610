"""A checked spec's runs: every (cell, seed) as an ordinary `cli.py fit` command line (`runs.Run`).

Apart from `runs` because it needs the suite's parser (`validate`, which imports Lightning), and a
scheduler job that only runs a `Run` must not.
"""

from __future__ import annotations

import json
from pathlib import Path

from contract.run_folder import last_checkpoint
from experiments.sweep.runs import Run
from experiments.sweep.spec import Spec
from experiments.sweep.validate import CheckedCell, cell_args


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
