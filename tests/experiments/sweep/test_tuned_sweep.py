"""A tuned sweep end to end (`tune:`): the search per cell, the bracketing, the final seeds at the chosen
point evaluated on the held-out test split; killed with SIGKILL in each phase and resumed, and run twice
at once on one folder. The rule itself is tested without training in test_tuning.py."""

from __future__ import annotations

import csv
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contract.run_record import read_run_record
from experiments.analysis.sweep_report import build_report
from experiments.sweep import run_sweep
from experiments.sweep.spec import SpecError, load_spec
from experiments.sweep.validate import check_spec
from tools import sweep

ROOT = Path(__file__).resolve().parents[3]
THREADS = ["--threads", "1"]
CELLS = ("pos_encoding=rope", "pos_encoding=alibi")
TUNE = {"grid": {"model.optim.lr": [0.003, 0.01]}, "extend": 1}
METRICS = ("val/loss", "test/loss", "test/loss@16", "test/loss@32", "train/loss")


def tuned_spec(tiny_spec, path: Path, **more):
    return tiny_spec(path, {"data.test_split": "held_out"}, grid={"model.arch.pos_encoding": ["rope", "alibi"]},
                     seeds=[0, 1], tune=TUNE | more)  # fmt: skip


def read_rows(out: Path) -> dict[tuple[str, str], dict[str, str]]:
    with (out / "results.csv").open(newline="") as f:
        return {(r["cell"], r["seed"]): r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def tuned_sweep(tmp_path_factory, tiny_spec):
    """The tuned sweep through the engine, then its report."""
    tmp = tmp_path_factory.mktemp("tuned")
    spec = tuned_spec(tiny_spec, tmp / "spec.yaml")
    outcome = run_sweep(spec, tmp / "out", threads=1)
    build_report(outcome.out_dir)
    return outcome, outcome.out_dir


def test_each_cell_is_searched_bracketed_and_evaluated_on_test(tuned_sweep):
    outcome, out = tuned_sweep
    rows = read_rows(out)
    assert outcome.failed == 0 and set(outcome.runs) <= {"done", "diverged"}
    # rounds: the initial grid, then an extension or the final seeds; each run in one phase
    assert outcome.rounds >= 2 and set(outcome.phases) == {"search", "final"}
    assert sorted(outcome.phases["final"]) == sorted(f"{c}/seed{s}" for c in CELLS for s in (0, 1))
    assert {n.split("/")[0] for n in outcome.phases["search"]} == {c for c, _ in rows if "~" in c}
    search = [r for r in rows.values() if r["phase"] == "search"]
    final = {key: r for key, r in rows.items() if r["phase"] == "final"}
    assert set(final) == {(cell, seed) for cell in CELLS for seed in ("0", "1")}
    for cell in CELLS:
        points = {float(r["model.optim.lr"]): r for r in search if r["cell"].startswith(f"{cell}~")}
        assert {0.003, 0.01} <= set(points) and all(r["seed"] == "0" for r in points.values())
        scores = {lr: float(r["val/loss"]) if r["status"] == "done" else math.inf for lr, r in points.items()}
        best = min(scores, key=scores.get)
        assert best != max(points) or len(points) == 3  # at the top edge: it extended once (extend: 1)
        lrs = sorted(points)  # open: the best at an edge, or an edge no worse than its neighbour (extend: 1 ends it)
        still_open = best in (lrs[0], lrs[-1]) or scores[lrs[0]] <= scores[lrs[1]] or scores[lrs[-1]] <= scores[lrs[-2]]
        for seed in ("0", "1"):
            row = final[(cell, seed)]
            assert row["unbracketed"] == ("model.optim.lr" if still_open else "")  # the ledger marks the cell
            assert float(row["model.optim.lr"]) == best and row["status"] == "done"
            assert all(math.isfinite(float(row[m])) for m in METRICS)
            assert row["test/loss"] != row["val/loss"]  # the held-out half, not the selection split
            record = read_run_record(out / cell / f"seed{seed}")
            assert record.test_split == "held_out" and record.test is not None


def test_report_compares_the_cells_on_test_at_their_tuned_points(tuned_sweep):
    _, out = tuned_sweep
    report = (out / "report.md").read_text()
    assert "### test/loss (lower is better) — main metric" in report
    assert "## Tuning" in report and "learning-rate sensitivity" in report.lower()
    assert (out / "plots" / "tuning_model.optim.lr.png").exists()
    assert "~" not in report.split("## Tuning")[0].split("## Results")[1]  # search runs are not cells compared


def test_dry_run_shows_the_initial_grid_and_the_rule(tmp_path, tiny_spec, capsys):
    spec = tuned_spec(tiny_spec, tmp_path / "spec.yaml")
    assert sweep.main([str(spec), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert len(out.strip().splitlines()) == 4  # 2 cells × 2 initial points × 1 tune seed; finals come later
    assert "initial grid of ['model.optim.lr']: [0.003], [0.01]" in err and "at most 1 step(s) per side" in err


def test_a_tuned_sweep_needs_a_held_out_test_split(tmp_path, tiny_spec):
    spec = tiny_spec(tmp_path / "spec.yaml", grid={"model.arch.pos_encoding": ["rope"]}, tune=TUNE)
    with pytest.raises(SpecError, match="data.test_split: held_out"):
        check_spec(load_spec(spec))


def test_a_misspelt_tuned_key_fails_before_any_run(tmp_path, tiny_spec):
    spec = tuned_spec(tiny_spec, tmp_path / "spec.yaml", grid={"model.optim.learning_rate": [0.003, 0.01]})
    with pytest.raises(SpecError, match="learning_rate"):
        check_spec(load_spec(spec))


def wait_for(sweep_process: subprocess.Popen, path: Path) -> None:
    deadline = time.monotonic() + 600
    while not path.exists():
        assert sweep_process.poll() is None, f"the sweep ended before {path} appeared"
        assert time.monotonic() < deadline, f"no {path} after 600 s"
        time.sleep(0.02)


@pytest.mark.slow  # a full tuned sweep again, killed twice (80 s); make test-all
def test_killed_in_each_phase_and_resumed_ends_with_the_same_ledger(tuned_sweep, tiny_spec, tmp_path):
    """SIGKILL mid-run in the search, then mid-run in the final phase; each restart resumes where the
    ledger and the checkpoints say, and the ledger ends as the uninterrupted sweep's."""
    _, reference = tuned_sweep
    spec = tuned_spec(tiny_spec, tmp_path / "spec.yaml")
    out = tmp_path / "out"
    command = [sys.executable, "cli.py", "sweep", str(spec), "--out", str(out), *THREADS]
    search_checkpoint = out / f"{CELLS[0]}~lr=0.01" / "seed0" / "checkpoints" / "last.ckpt"
    final_checkpoint = out / CELLS[0] / "seed0" / "checkpoints" / "last.ckpt"
    for checkpoint in (search_checkpoint, final_checkpoint):
        killed = subprocess.Popen(command, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.STDOUT)  # fmt: skip
        wait_for(killed, checkpoint)
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
    assert sweep.main(command[3:]) == 0
    rows, expected = read_rows(out), read_rows(reference)
    assert rows.keys() == expected.keys()
    for key, row in rows.items():
        assert row["status"] == expected[key]["status"] and row["model.optim.lr"] == expected[key]["model.optim.lr"]
        for metric in METRICS:
            if expected[key].get(metric):
                assert float(row[metric]) == pytest.approx(float(expected[key][metric]), rel=1e-5), (key, metric)


@pytest.mark.slow  # the claims are the plain sweep's (test_sweep_runs.py: concurrent sweeps); make test-all
def test_two_tuned_sweeps_on_one_folder_train_each_run_once(tuned_sweep, tiny_spec, tmp_path):
    spec = tuned_spec(tiny_spec, tmp_path / "spec.yaml")
    out = tmp_path / "out"
    command = [sys.executable, "cli.py", "sweep", str(spec), "--out", str(out), *THREADS]
    logs = [tmp_path / f"sweep{i}.log" for i in range(2)]
    sweeps = [subprocess.Popen(command, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT) for log in logs]
    assert [s.wait(timeout=900) for s in sweeps] == [0, 0], [log.read_text() for log in logs]
    assert sweep.main(command[3:]) == 0  # records what either left to the other, runs nothing new
    rows = read_rows(out)
    assert rows.keys() == read_rows(tuned_sweep[1]).keys()
    for cell, seed in rows:
        log = (out / cell / f"seed{seed}" / "run.log").read_text()
        assert log.count(" start: ") == 1, (cell, seed)  # trained once, by one of the two sweeps
