"""The sweep's progress lines: counts, and an ETA from each run's own cell's durations (the ledger's earlier runs
and this invocation's), so a resumed sweep has one from its first line and a ladder's large cells count as large."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from experiments.records.ledger import Ledger
from experiments.sweep import recording
from experiments.sweep.recording import Progress
from experiments.sweep.runner import Outcome
from experiments.sweep.runs import Run


def _ledger(path: Path, rows: list[tuple[str, int, str, str]]) -> Ledger:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["cell", "seed", "status", "wall_time_s"])
        writer.writerows(rows)
    return Ledger(path)


def _run(tmp_path: Path, cell: str, seed: int) -> Run:
    return Run(cell, seed, tmp_path / cell / f"seed{seed}", ("--never-run",), 1)


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(recording.time, "monotonic", lambda: now[0])
    return now


def test_eta_sums_each_runs_own_cells_mean_from_the_ledger(tmp_path, clock, capsys):
    ledger = _ledger(
        tmp_path / "results.csv",
        [
            ("small~lr=0.001", 10, "done", "100"),  # a search point: counts for its base cell
            ("small~lr=0.002", 10, "done", "140"),
            ("large~lr=0.001", 10, "done", "600"),
            ("large", 0, "done", "600"),  # finished: counted as finished, not left
            ("small~lr=0.004", 10, "failed", ""),  # no duration
        ],
    )
    runs = [_run(tmp_path, "small", 0), _run(tmp_path, "large", 0), _run(tmp_path, "large", 1)]
    progress = Progress(runs, ledger, retry_failed=False, jobs=2)
    assert (progress.total, progress.finished) == (3, 1)
    progress.started(runs[0], "start")
    # left: small (mean 120) + large seed 1 (mean 600), two at a time
    assert capsys.readouterr().err.strip() == "[sweep 1/3] starting small/seed0 · elapsed 0m00s · ETA 6m00s"

    clock[0] += 100  # the running run has 20 s of its estimate left
    progress.started(runs[2], "resume")
    assert capsys.readouterr().err.strip().endswith("· elapsed 1m40s · ETA 5m10s")

    clock[0] += 200  # small took 300 s here: its mean becomes (100 + 140 + 300) / 3
    progress.ended(runs[0], Outcome("done"), 1000.0)
    assert capsys.readouterr().err.strip() == "[sweep 2/3] small/seed0 done · ETA 3m20s"  # (600 - 200) / 2


def test_a_cell_with_no_history_takes_the_mean_of_every_run_and_none_at_all_waits(tmp_path, capsys):
    ledger = _ledger(tmp_path / "results.csv", [("a", 0, "done", "100"), ("b", 0, "done", "300")])
    progress = Progress([_run(tmp_path, "c", 0)], ledger, retry_failed=False, jobs=1)
    progress.say(progress._eta())
    assert capsys.readouterr().err.strip() == "[sweep 0/1] ETA 3m20s"

    empty = Progress([_run(tmp_path, "c", 0)], Ledger(tmp_path / "none.csv"), retry_failed=False, jobs=1)
    empty.say(empty._eta())
    assert capsys.readouterr().err.strip() == "[sweep 0/1] ETA after the first run"


def test_a_failed_run_to_retry_is_left_not_finished(tmp_path):
    ledger = _ledger(tmp_path / "results.csv", [("a", 0, "failed", "")])
    runs = [_run(tmp_path, "a", 0)]
    assert Progress(runs, ledger, retry_failed=False, jobs=1).finished == 1
    assert Progress(runs, ledger, retry_failed=True, jobs=1).finished == 0
