"""A complete `RunRecord` for tests that need a run folder's `run.json` without training a run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from contract.run_record import RunRecord

RECORD = RunRecord(
    status="done",
    seed=0,
    git_commit="0" * 40,
    packages={"python": "3.11.7", "torch": "2.14.1", "lightning": "2.6.6"},
    data_checksum="c" * 64,
    data_splits=None,
    test_split=None,
    threads=1,
    processes=1,
    params=1000,
    params_non_embedding=800,
    params_trainable=1000,
    flops_per_token=6000.0,
    steps=12,
)


def write_record(run_dir: Path, **fields: Any) -> RunRecord:
    """Writes `RECORD` with `fields` changed as `run_dir`'s run.json (the folder made if needed)."""
    record = replace(RECORD, **fields)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    record.write(run_dir)
    return record
