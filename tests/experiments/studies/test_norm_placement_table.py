"""The norm-placement study's per-seed table, from synthetic runs' ledger rows and TensorBoard events."""

from __future__ import annotations

import csv

from torch.utils.tensorboard import SummaryWriter

from experiments.studies.norm_placement import loss_table

KEYS = list(loss_table.KEYS)
# (layers, placement, warmup, lr, seed) -> val/loss at steps 199, 399
RUNS = {
    (6, "post", 0, 0.003, 0): (3.34, 3.34),  # collapsed to the unigram loss and stayed
    (6, "post", 0, 0.003, 1): (3.30, 2.60),  # left the plateau after step 200
    (6, "post", 200, 0.003, 0): (2.90, 2.20),
    (6, "pre", 0, 0.001, 0): (2.80, 2.40),
    (2, "pre", 0, 0.003, 0): (2.70, 2.45),
}


def test_table_marks_the_plateau_and_orders_rows(tmp_path, capsys):
    with (tmp_path / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, ["cell", "seed", "status", *KEYS, "diverged_at_step", "val/loss", "error"])
        writer.writeheader()
        for (layers, placement, warmup, lr, seed), losses in RUNS.items():
            cell = f"L{layers}-{placement}-warmup{warmup}-lr{lr}"
            events = SummaryWriter(tmp_path / cell / f"seed{seed}")
            for step, loss in zip((199, 399), losses):
                events.add_scalar("val/loss", loss, step)
            events.close()
            values = dict(zip(KEYS, (layers, placement, warmup, lr)))
            writer.writerow({"cell": cell, "seed": seed, "status": "done", **values, "val/loss": losses[-1]})
        writer.writerow(
            {"cell": "L6-pre-warmup0-lr0.001", "seed": 1, "status": "failed", **dict(zip(KEYS, (6, "pre", 0, 0.001)))}
        )
        # a diverged run whose last validation sat on the plateau: its outcome is the divergence
        diverged = dict(zip(KEYS, (6, "post", 0, 0.003)))
        writer.writerow({"cell": "L6-post-warmup0-lr0.003", "seed": 2, "status": "diverged", **diverged,
                         "diverged_at_step": 113, "val/loss": 3.335})  # fmt: skip
    assert loss_table.main([str(tmp_path)]) == 0
    text = (tmp_path / "loss_table.md").read_text()
    assert text in capsys.readouterr().out
    rows = [line for line in text.splitlines() if line.startswith("| 6") or line.startswith("| 2")]
    assert rows == [
        "| 6 | post | 0 | — | **3.340 (stuck)**, **2.600 (stuck to step 200)**, **diverged at step 113** |",
        "| 6 | post | 200 | — | 2.200 |",
        "| 6 | pre | 0 | 2.400 | — |",  # the failed seed is left out
        "| 2 | pre | 0 | — | 2.450 |",
    ]
