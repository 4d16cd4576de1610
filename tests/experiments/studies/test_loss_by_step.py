"""loss_by_step: a sweep's validation curves per cell, from synthetic runs' TensorBoard events."""

import math

import pytest

from experiments.studies import loss_by_step

# cell -> seed -> {tag: {step: value}}
RUNS = {
    "pos_encoding=rope": {
        0: {"val/loss": {99: 2.9, 199: 2.4}, "val/acc": {99: 0.30, 199: 0.40}},
        1: {"val/loss": {99: 3.1, 199: 2.6}, "val/acc": {99: 0.28, 199: 0.44}},
    },
    # a run that diverged at its last validation: the last finite accuracy counts, the nan loss does not
    "pos_encoding=none": {
        0: {"val/loss": {99: 3.1, 199: math.nan}, "val/acc": {99: 0.22, 199: math.nan}, "val/loss@256": {199: 4.0}}
    },
}


@pytest.fixture
def sweep_dir(write_sweep):
    # a failed run is not read (it has no events)
    return write_sweep(RUNS, [{"cell": "pos_encoding=rope", "seed": 2, "status": "failed", "error": "boom"}])


def test_loss_per_step_and_other_metrics_at_the_last_step(sweep_dir):
    text = loss_by_step.table(sweep_dir)
    assert "| cell | seeds | step 100 | step 200 | val/acc (last) |" in text
    assert "val/loss@256" not in text  # per-length losses are not this table's
    # rope: step 100 mean 3.0, sample std 0.141; step 200 2.5 ± 0.141; accuracy 0.42 ± 0.028
    assert "| pos_encoding=rope | 2 | 3.000 ± 0.141 | 2.500 ± 0.141 | 0.420 ± 0.028 |" in text
    assert "| pos_encoding=none | 1 | 3.100 | n/a | 0.220 |" in text


def test_main_writes_the_table_next_to_the_ledger(sweep_dir, capsys):
    assert loss_by_step.main([str(sweep_dir)]) == 0
    assert (sweep_dir / "loss_by_step.md").read_text() in capsys.readouterr().out


def test_a_sweep_without_curves_is_refused(tmp_path):
    (tmp_path / "results.csv").write_text("cell,seed,status,val/loss,error\n")
    with pytest.raises(SystemExit, match="no finished run logged val/loss"):
        loss_by_step.table(tmp_path)
