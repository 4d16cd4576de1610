"""`cli.py report` on a synthetic ledger: its statistics against scipy, computed here independently."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from scipy import stats

from experiments.analysis import report

SEEDS = [0, 1, 2, 3, 4]
RNG = np.random.default_rng(0)
# cell -> seed -> (status, val/loss, val/acc); "rms" has a diverged and a failed run, "one" a single done run
LOSS = {"ln": 2.0 + 0.05 * RNG.standard_normal(5), "rms": 1.9 + 0.05 * RNG.standard_normal(5), "one": [2.5] * 5}
ACC = {"ln": 0.60 + 0.02 * RNG.standard_normal(5), "rms": 0.62 + 0.02 * RNG.standard_normal(5), "one": [0.3] * 5}
STATUS = {"ln": ["done"] * 5, "rms": ["done", "done", "diverged", "done", "failed"], "one": ["done"] + ["failed"] * 4}
PARAMS = {"ln": 1000, "rms": 1000, "one": 1200}  # 20% more: the report must warn


@pytest.fixture
def sweep_dir(tmp_path):
    columns = [
        "cell",
        "seed",
        "status",
        "model.arch.norm",
        "steps",
        "params",
        "flops_per_token",
        "val/acc",
        "val/loss",
        "error",
    ]
    with (tmp_path / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for cell in LOSS:
            for i, seed in enumerate(SEEDS):
                done = STATUS[cell][i] == "done"
                writer.writerow(
                    {"cell": cell, "seed": seed, "status": STATUS[cell][i], "model.arch.norm": cell, "steps": 10,
                     "params": PARAMS[cell], "flops_per_token": 2 * PARAMS[cell],
                     "val/loss": repr(float(LOSS[cell][i])) if done else "nan",
                     "val/acc": repr(float(ACC[cell][i])) if done else "",
                     "error": "" if STATUS[cell][i] != "failed" else "RuntimeError: boom"}
                )  # fmt: skip
    info = {"cells": [{"name": c, "overrides": {"model.arch.norm": c}} for c in LOSS], "baseline": "ln"}
    (tmp_path / "sweep.json").write_text(json.dumps(info | {"axes": ["model.arch.norm"], "seeds": SEEDS}))
    return tmp_path


def done_values(cell: str, values) -> dict[int, float]:
    return {s: float(values[cell][i]) for i, s in enumerate(SEEDS) if STATUS[cell][i] == "done"}


def test_statistics_match_scipy(sweep_dir):
    assert report.main([str(sweep_dir)]) == 0
    with (sweep_dir / "report.csv").open(newline="") as f:
        rows = {(r["metric"], r["cell"]): r for r in csv.DictReader(f)}
    for metric, values in (("val/loss", LOSS), ("val/acc", ACC)):
        base = done_values("ln", values)
        for cell in ("ln", "rms"):
            x = done_values(cell, values)
            v = np.array(list(x.values()))
            row = rows[(metric, cell)]
            assert int(row["n"]) == len(v)
            assert float(row["mean"]) == pytest.approx(v.mean(), rel=1e-12)
            assert float(row["std"]) == pytest.approx(v.std(ddof=1), rel=1e-12)
            low, high = stats.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=stats.sem(v))
            assert (float(row["ci_low"]), float(row["ci_high"])) == pytest.approx((low, high), rel=1e-12)
            if cell != "ln":
                common = sorted(set(x) & set(base))
                a, b = np.array([x[s] for s in common]), np.array([base[s] for s in common])
                assert int(row["n_pairs"]) == len(common) == 3
                assert float(row["diff_vs_baseline"]) == pytest.approx((a - b).mean(), rel=1e-12)
                assert float(row["p_value"]) == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-9)
        one = rows[(metric, "one")]
        assert one["n"] == "1" and one["std"] == one["ci_low"] == one["p_value"] == ""  # n < 2: n/a
    # ranks follow val/loss (lower is better); val/acc's best is its highest mean
    ranks = {cell: int(rows[("val/loss", cell)]["rank"]) for cell in LOSS}
    assert sorted(ranks, key=ranks.get) == sorted(LOSS, key=lambda c: np.mean(list(done_values(c, LOSS).values())))
    best_acc = max(("ln", "rms", "one"), key=lambda c: np.mean(list(done_values(c, ACC).values())))
    assert [c for c in LOSS if rows[("val/acc", c)]["best"] == "True"] == [best_acc]
    assert rows[("val/loss", "rms")]["diverged"] == "1" and rows[("val/loss", "rms")]["failed"] == "1"


def test_markdown_counts_outcomes_and_warns(sweep_dir):
    report.main([str(sweep_dir)])
    text = (sweep_dir / "report.md").read_text()
    assert "3/5, 1 diverged, 1 failed" in text and "1/5, 4 failed" in text
    assert "ttest_rel" in text and "Warning" in text and "20.0%" in text
    assert "val/acc (higher is better)" in text and "val/loss (lower is better) — main metric" in text
    main_table = text.split("### val/loss (lower")[1].split("###")[0]
    assert main_table.index("`rms`") < main_table.index("`ln`") < main_table.index("`one`")
    assert list((sweep_dir / "_summary").rglob("events.out.tfevents.*"))
