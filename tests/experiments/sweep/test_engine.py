"""`experiments.sweep.run_sweep`: a real tiny sweep run as a library call, and the `SweepOutcome` it returns
(runs by status, the ledger, rounds, claims); `plan_sweep`'s checks before any run."""

from __future__ import annotations

import csv

import pytest

from experiments.sweep import UNRECORDED, SpecError, SweepOutcome, load_spec, plan_sweep, run_sweep
from experiments.sweep.claims import acquire

BAD_BPE = {"name": "bad_bpe", "data.tokenizer": "bpe", "data.bpe_vocab_size": 10}  # fails when its data is built
FAST = {"trainer.max_steps": 4, "trainer.val_check_interval": 4}


@pytest.fixture(scope="module")
def outcome(tmp_path_factory, tiny_spec) -> SweepOutcome:
    """One good cell and one that fails, one seed each, run by the pool (one run at a time, one thread)."""
    tmp = tmp_path_factory.mktemp("engine")
    spec = tiny_spec(tmp / "spec.yaml", FAST, cells=[{"model.arch.pos_encoding": "alibi"}, BAD_BPE], seeds=[0])
    return run_sweep(load_spec(spec), tmp / "out", threads=1)


def test_the_outcome_says_what_ran_and_how_it_ended(outcome):
    assert outcome.runs == {"done": ("pos_encoding=alibi/seed0",), "failed": ("bad_bpe/seed0",)}
    assert (outcome.total, outcome.recorded, outcome.failed, outcome.finished) == (2, 2, 1, 1)
    assert outcome.rounds == 1 and outcome.phases == {} and outcome.claimed == () and outcome.submitted == 0
    assert outcome.waited and outcome.superseded is None
    with outcome.ledger.open(newline="") as f:  # the ledger it names holds what it says
        rows = {r["cell"]: r["status"] for r in csv.DictReader(f)}
    assert rows == {"pos_encoding=alibi": "done", "bad_bpe": "failed"}
    assert outcome.ledger == outcome.out_dir / "results.csv" and (outcome.out_dir / "sweep.json").exists()


def test_a_second_call_runs_nothing_and_retries_failures_only_when_asked(outcome):
    log = outcome.out_dir / "bad_bpe" / "seed0" / "run.log"
    attempts = log.read_text().count("\n=== ")
    again = run_sweep(outcome.spec, outcome.out_dir, threads=1)
    assert again.runs == outcome.runs and log.read_text().count("\n=== ") == attempts
    retried = run_sweep(outcome.spec, outcome.out_dir, threads=1, retry_failed=True)
    assert retried.failed == 1 and log.read_text().count("\n=== ") == attempts + 1


def test_a_run_another_process_holds_is_left_unrecorded_and_named(outcome, tiny_spec, tmp_path):
    spec = load_spec(tiny_spec(tmp_path / "spec.yaml", FAST, cells=[BAD_BPE], seeds=[0, 1]))
    with acquire(tmp_path / "out" / "bad_bpe" / "seed1"):  # a live claim: this process's own
        result = run_sweep(spec, tmp_path / "out", threads=1)
    assert result.runs == {"failed": ("bad_bpe/seed0",), UNRECORDED: ("bad_bpe/seed1",)}
    assert [name for name, _ in result.claimed] == ["bad_bpe/seed1"] and "claimed by" in result.claimed[0][1]
    assert (result.total, result.recorded) == (2, 1)


def test_plan_sweep_checks_before_any_run(outcome, tiny_spec, tmp_path):
    plan = plan_sweep(outcome.spec, outcome.out_dir, jobs=2, rerun=["bad_bpe"])
    lines, notes = plan.dry_run()  # the rerun cell starts again; the finished one is left
    assert len(lines) == 1 and "bad_bpe" in lines[0] and notes == ["# 1 of 2 runs to run (1 finished or recorded)"]
    other = tiny_spec(tmp_path / "other.yaml", FAST | {"trainer.max_steps": 6}, cells=[BAD_BPE], seeds=[0])
    with pytest.raises(SpecError, match="holds a sweep with different"):  # another sweep's folder
        plan_sweep(other, outcome.out_dir)
    with pytest.raises(SpecError, match="choose one of"):
        plan_sweep(outcome.spec, outcome.out_dir, launcher="kubernetes")
