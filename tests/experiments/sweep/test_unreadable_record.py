"""A `run.json` this code cannot read (a newer schema version, a hand-edited file) fails its run with the record's
one-line error: the sweep goes on, the ledger records it, and nothing in the run's folder is cleared."""

from __future__ import annotations

import json

from contract.run_folder import FAILED
from experiments.records.ledger import collect_row
from experiments.sweep.runner import finished_outcome, run_outcome
from experiments.sweep.runs import Run


def test_an_unreadable_run_json_fails_the_run_not_the_sweep(tmp_path):
    run = Run("cell", 0, tmp_path / "cell" / "seed0", ("--seed_everything=0",), 1)
    run.dir.mkdir(parents=True)
    (run.dir / "run.json").write_text(json.dumps({"schema_version": 99, "status": "done"}))
    ended = finished_outcome(run)
    assert ended.status == FAILED and "run.json" in ended.error and "understood" in ended.error
    assert "\n" not in ended.error
    assert run_outcome(run, 0, "").status == FAILED  # after an attempt, too
    row = collect_row(run.dir, "cell", 0, FAILED, ended.error, {})  # the ledger row is written, not raised
    assert row["status"] == FAILED and row["error"] == ended.error and row["git_commit"] == ""
    assert json.loads((run.dir / "run.json").read_text())["schema_version"] == 99  # kept as it was
