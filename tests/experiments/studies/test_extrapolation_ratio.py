"""The extrapolation study's degradation-against-training table, from synthetic runs' TensorBoard events."""

from __future__ import annotations

import math

import pytest

from experiments.studies.extrapolation import ratio_by_step

# cell -> seed -> step -> (loss@64, loss@512)
RUNS = {
    "pos_encoding=rope": {
        0: {399: (2.0, 2.2), 799: (1.8, 2.25)},
        1: {399: (2.0, 2.3), 799: (1.9, 2.47)},
        2: {399: (2.0, 2.1), 799: (1.7, 2.21)},
    },
    "pos_encoding=learned": {0: {399: (2.1, math.nan), 799: (1.9, math.nan)}},
}


def _per_length(steps: dict[int, tuple[float, float]]) -> dict[str, dict[int, float]]:
    return {"val/loss@64": {s: v[0] for s, v in steps.items()}, "val/loss@512": {s: v[1] for s, v in steps.items()}}


@pytest.fixture
def sweep_dir(write_sweep):
    runs = {cell: {seed: _per_length(steps) for seed, steps in seeds.items()} for cell, seeds in RUNS.items()}
    # a failed run's events (if any) are not read
    return write_sweep(runs, [{"cell": "pos_encoding=rope", "seed": 3, "status": "failed", "error": "boom"}])


def test_ratio_per_step_and_its_paired_change(sweep_dir):
    ratios = {seed: ratio_by_step.ratios(sweep_dir / "pos_encoding=rope" / f"seed{seed}") for seed in (0, 1, 2)}
    assert ratios[0] == (64, 512, pytest.approx({399: 1.1, 799: 1.25}))
    text = ratio_by_step.table(sweep_dir)
    # step 400: 1.1, 1.15, 1.05; step 800: 1.25, 1.3, 1.3; change +0.15, +0.15, +0.25: mean +0.183,
    # t-interval ±0.143, scipy.stats.ttest_1samp p = 0.0315
    assert "| pos_encoding=rope | 3 | 1.100 ± 0.050 | 1.283 ± 0.029 | +0.183 [+0.040, +0.327], p = 0.032 |" in text
    assert "step 400 | step 800" in text and "change 400 → 800" in text
    assert "pos_encoding=learned" not in text  # no finite loss past its training length: no ratio


def test_main_writes_the_table_next_to_the_ledger(sweep_dir, capsys):
    assert ratio_by_step.main([str(sweep_dir)]) == 0
    assert (sweep_dir / "ratio_by_step.md").read_text() in capsys.readouterr().out
