"""A finished sweep written without training: each run's event files come from Lightning's own
TensorBoardLogger, with the hparams and metrics a run logs (lit_modules/base.py), so that the report
reads what a real sweep leaves, in a fraction of a second per run."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

AXIS = "model.arch.pos_encoding"
CELLS = {"pos_encoding=rope": "rope", "pos_encoding=learned": "learned"}
SEEDS = (0, 1, 2)
FAILED = ("pos_encoding=learned", 2)  # failed at step 4: counted, not averaged
TRAIN_STEPS = (1, 3, 5, 7)
VAL_STEPS = (3, 7)
LENGTHS = (16, 32)  # learned positions end at 16: no value at 32, as in a real sweep
PARAMS = {"pos_encoding=rope": 1000, "pos_encoding=learned": 1512}


@dataclass
class Sweep:
    """The sweep folder and what its runs logged: (cell, seed) -> tag -> {step: value}."""

    dir: Path
    curves: dict[tuple[str, int], dict[str, dict[int, float]]] = field(default_factory=dict)

    def done(self, cell: str) -> list[dict[str, dict[int, float]]]:
        return [c for (name, seed), c in self.curves.items() if name == cell and (name, seed) != FAILED]


def log_run(run_dir: Path, cell: str, value: str, seed: int, rng: np.random.Generator) -> dict[str, dict[int, float]]:
    """One run's events as Lightning's TensorBoardLogger writes them: the HParams session (arch/*,
    optim/*, model statistics; NaN placeholders for the metrics), scalars at their steps."""
    from lightning.pytorch.loggers import TensorBoardLogger

    logger = TensorBoardLogger(save_dir=str(run_dir), name="", version="", default_hp_metric=False)
    metrics = ["val/loss", *(f"val/loss@{n}" for n in LENGTHS)]
    flat = {"arch/pos_encoding": value, "arch/d_model": 32, "arch/norm": "layernorm", "arch/attn_scale": None,
            "optim/lr": 1e-3, "params": PARAMS[cell], "flops_per_token": 2000}  # fmt: skip
    logger.log_hyperparams(flat, {m: math.nan for m in metrics})
    last = 4 if (cell, seed) == FAILED else max(TRAIN_STEPS)
    curves: dict[str, dict[int, float]] = {}
    base = 2.0 + (0.3 if value == "learned" else 0.0)
    for step in TRAIN_STEPS:
        if step <= last:
            curves.setdefault("train/loss", {})[step] = base + 1 / step + 0.05 * rng.standard_normal()
    for step in VAL_STEPS:
        if step <= last:
            for n in LENGTHS if value != "learned" else LENGTHS[:1]:
                curves.setdefault(f"val/loss@{n}", {})[step] = base + 1 / step + 0.01 * n / 16 + 0.02 * rng.random()
            curves["val/loss"] = curves.get("val/loss", {}) | {step: curves[f"val/loss@{LENGTHS[0]}"][step]}
    for tag, points in curves.items():
        for step, v in points.items():
            logger.log_metrics({tag: v}, step=step)
    logger.log_metrics({"epoch": 0.0}, step=last)
    logger.finalize("success")
    return curves


def write_sweep(out: Path) -> Sweep:
    rng = np.random.default_rng(0)
    sweep = Sweep(out)
    rows = []
    for cell, value in CELLS.items():
        for seed in SEEDS:
            curves = log_run(out / cell / f"seed{seed}", cell, value, seed, rng)
            sweep.curves[(cell, seed)] = curves
            failed = (cell, seed) == FAILED
            final = {tag: "" if failed else repr(points[max(points)]) for tag, points in curves.items()}
            row = {"cell": cell, "seed": seed, "status": "failed" if failed else "done", AXIS: value,
                   "params": PARAMS[cell], "git_commit": "a" * 40, "error": "boom" if failed else ""}  # fmt: skip
            rows.append(row | final)
    # a run a re-run replaced: moved aside by the ledger, never in the comparison
    log_run(out / "superseded" / "20260101-000000" / "pos_encoding=alibi" / "seed0", "pos_encoding=rope", "alibi",
            0, rng)  # fmt: skip
    columns = ["cell", "seed", "status", AXIS, "params", "train/loss", "val/loss",
               *(f"val/loss@{n}" for n in LENGTHS), "git_commit", "error"]  # fmt: skip
    with (out / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    cells = [{"name": cell, "overrides": {AXIS: value}} for cell, value in CELLS.items()]
    info = {"spec": "spec.yaml", "base": ["configs/gpt/base.yaml"], "fixed": {}, "axes": [AXIS], "cells": cells,
            "seeds": list(SEEDS), "baseline": "pos_encoding=rope"}  # fmt: skip
    (out / "sweep.json").write_text(json.dumps(info))
    return sweep


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory) -> Sweep:
    """2 cells x 3 seeds (one run failed), a superseded run, then `cli.py report`."""
    from tools import report

    sweep = write_sweep(tmp_path_factory.mktemp("sweep"))
    assert report.main([str(sweep.dir)]) == 0
    return sweep
