"""Synthetic sweep folders for the study table scripts: a ledger and each run's TensorBoard events."""

from __future__ import annotations

import csv

import pytest
from torch.utils.tensorboard import SummaryWriter


@pytest.fixture
def write_sweep(tmp_path):
    """`write_sweep(runs, extra_rows=())` writes {cell: {seed: {tag: {step: value}}}} as finished runs
    (events, and a `done` ledger row with the last val/loss) and `extra_rows` as ledger rows as they are;
    returns the sweep folder."""

    def write(runs: dict, extra_rows: tuple[dict, ...] = ()):
        with (tmp_path / "results.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, ["cell", "seed", "status", "val/loss", "error"])
            writer.writeheader()
            for cell, seeds in runs.items():
                for seed, tags in seeds.items():
                    events = SummaryWriter(tmp_path / cell / f"seed{seed}")
                    for tag, curve in tags.items():
                        for step, value in curve.items():
                            events.add_scalar(tag, value, step)
                    events.close()
                    loss = tags.get("val/loss", {})
                    writer.writerow(
                        {"cell": cell, "seed": seed, "status": "done", "val/loss": loss.get(max(loss, default=0), "")}
                    )
            writer.writerows(extra_rows)
        return tmp_path

    return write
