"""`cli.py sweep` running real tiny sweeps: what a sweep writes, a sweep killed mid-run and resumed,
divergence and failure as outcomes, `--rerun`, two sweeps sharing a folder, the `local` launcher
(submitit) against the in-process pool, and warm runs (the pool's default) against fresh processes
(`--no-warm`). Spec errors and `--dry-run`, which run nothing, are in test_sweep_spec_checks.py."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from contract.run_record import read_run_record
from experiments.records.ledger import TIMINGS
from experiments.sweep import run_sweep
from experiments.sweep.warm import Warm, WarmProcess
from tests.experiments.sweep.sweep_outputs import by_run, read_rows, run_folder
from tools import sweep

ROOT = Path(__file__).resolve().parents[3]
METRICS = ("val/loss", "val/loss@16", "val/loss@32", "val/ppl", "val/bpt", "train/loss")
CELLS = ("pos_encoding=learned", "pos_encoding=alibi")
THREADS = ["--threads", "1"]  # a tiny model on a shared machine: one thread is fastest, and equal in both sweeps


def record_warm_starts(patch: pytest.MonkeyPatch) -> list:
    """What each `Warm.start` returned from now on (a `WarmProcess`, or None: a fresh process)."""
    started, start = [], Warm.start

    def recording(self, *args, **kwargs):
        started.append(start(self, *args, **kwargs))
        return started[-1]

    patch.setattr(Warm, "start", recording)
    return started


MAIN_WARM_STARTS: list = []  # what main_sweep's runs started as


def assert_alibi_run_matches(out: Path, main_out: Path, **tolerance: float) -> None:
    """The alibi seed-0 run of the sweep in `out` ended done after 12 steps with main_sweep's numbers."""
    row = by_run(read_rows(out))[("pos_encoding=alibi", "0")]
    reference = by_run(read_rows(main_out))[("pos_encoding=alibi", "0")]
    assert row["status"] == "done" and row["steps"] == "12"
    for metric in METRICS:
        assert float(row[metric]) == pytest.approx(float(reference[metric]), **tolerance), metric


def wait_for_checkpoint(sweep: subprocess.Popen, checkpoint: Path) -> None:
    """Waits until the sweep's run has saved its first checkpoint (mid-run: a tiny run saves every 2 of 12 steps)."""
    deadline = time.monotonic() + 300
    while not checkpoint.exists():
        assert sweep.poll() is None, "the sweep ended before its first checkpoint"
        assert time.monotonic() < deadline, "no checkpoint after 300 s"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def main_sweep(tmp_path_factory, tiny_spec):
    """2 cells x 2 seeds, uninterrupted (each run forked from the warm process: the default)."""
    tmp = tmp_path_factory.mktemp("main")
    spec = tiny_spec(tmp / "spec.yaml", grid={"model.arch.pos_encoding": ["learned", "alibi"]}, seeds=[0, 1])
    out = tmp / "out"
    with pytest.MonkeyPatch.context() as patch:
        started = record_warm_starts(patch)
        code = sweep.main([str(spec), "--out", str(out), *THREADS])
    MAIN_WARM_STARTS[:] = started
    return code, out


@pytest.fixture(scope="module")
def killed_sweep(tmp_path_factory, tiny_spec):
    """alibi (the main sweep's seed-0 run, killed mid-run and resumed), a diverging cell and a failing
    cell (a BPE vocabulary smaller than its byte alphabet: a ValueError when the data is built)."""
    tmp = tmp_path_factory.mktemp("killed")
    bad_bpe = {"name": "bad_bpe", "data.tokenizer": "bpe", "data.bpe_vocab_size": 10}
    cells = [{"model.arch.pos_encoding": "alibi"}, {"model.optim.lr": 1000.0}, bad_bpe]
    spec = tiny_spec(tmp / "spec.yaml", cells=cells, seeds=[0])
    out = tmp / "out"
    command = [sys.executable, "cli.py", "sweep", str(spec), "--out", str(out), *THREADS]
    first = subprocess.Popen(
        command, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    checkpoint = out / "pos_encoding=alibi" / "seed0" / "checkpoints" / "last.ckpt"
    wait_for_checkpoint(first, checkpoint)
    os.killpg(first.pid, signal.SIGKILL)  # the sweep and its run, mid-run
    first.wait()
    status = read_run_record(checkpoint.parent.parent).status
    assert status == "running", "the run finished before the kill: the test would prove nothing"
    assert not (out / "results.csv").exists() or not read_rows(out)
    resumed = sweep.main(command[3:])
    again = sweep.main(command[3:])  # everything recorded: runs nothing
    return resumed, again, out


def test_sweep_writes_ledger_report_and_plots(main_sweep):
    code, out = main_sweep
    assert code == 0
    rows = by_run(read_rows(out))
    assert set(rows) == {(c, s) for c in ("pos_encoding=learned", "pos_encoding=alibi") for s in ("0", "1")}
    resolved = {c["name"]: c["resolved"] for c in json.loads((out / "sweep.json").read_text())["cells"]}
    for (cell, seed), row in rows.items():
        assert row["status"] == "done" and row["steps"] == "12" and not row["error"]
        assert row["model.arch.pos_encoding"] == cell.split("=")[1]
        assert float(row["params"]) > 0 and float(row["flops_per_token"]) > 0 and float(row["wall_time_s"]) > 0
        for metric in METRICS:
            if (cell, metric) != ("pos_encoding=learned", "val/loss@32"):
                assert math.isfinite(float(row[metric])), (cell, metric)
        assert row["val/loss"] == row["val/loss@16"]
        run_dir = out / cell / f"seed{seed}"  # exactly DIR/<cell>/seed<k>
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert config["seed_everything"] == int(seed) and config["data"]["init_args"]["seed"] == int(seed)
        assert config["model"]["init_args"]["arch"]["pos_encoding"] == cell.split("=")[1]
        kept, ran = resolved[cell]["model"]["init_args"], config["model"]["init_args"]  # sweep.json: what runs
        assert kept["arch"] == ran["arch"] and kept["optim"] == ran["optim"]
        assert list(run_dir.glob("events.out.tfevents.*")) and (run_dir / "run.log").stat().st_size
    # learned positions end at 16: no loss at 32, shown n/a
    assert rows[("pos_encoding=learned", "0")]["val/loss@32"] == ""
    # seeds differ, runs of one seed differ only in the axis
    assert rows[("pos_encoding=alibi", "0")]["val/loss"] != rows[("pos_encoding=alibi", "1")]["val/loss"]

    report = (out / "report.md").read_text()
    assert "ttest_rel" in report and "baseline" in report and "★" in report and "n/a" in report
    for plot in ("val_loss.png", "train_loss.png", "length_extrapolation.png"):
        assert (out / "plots" / plot).stat().st_size > 0
        assert f"(plots/{plot})" in report
    with (out / "report.csv").open(newline="") as f:
        assert {r["metric"] for r in csv.DictReader(f)} >= {"val/loss", "val/loss@32"}
    assert list((out / "_summary").rglob("events.out.tfevents.*"))


def test_run_logs_have_one_progress_line_per_validation(main_sweep):
    """12 steps validated every 4: three lines, and none of a live bar's redraws (carriage returns, escapes)."""
    _, out = main_sweep
    for log in out.glob("*/seed*/run.log"):
        text = log.read_text()
        assert "\r" not in text and "\x1b[" not in text, log
        steps = [line for line in text.splitlines() if line.startswith("step ")]
        assert [line.split()[1] for line in steps] == ["4/12", "8/12", "12/12"], log
        assert all("train/loss" in line and "val/loss" in line and "elapsed" in line for line in steps)


def test_sweep_records_each_runs_code(main_sweep):
    """The ledger's git_commit is the run's own (run.json), and a dirty one has its patch beside it (this
    tree may be clean or dirty: tests/experiments/sweep/test_provenance.py makes both on a temporary repo)."""
    _, out = main_sweep
    for (cell, seed), row in by_run(read_rows(out)).items():
        run_dir = out / cell / f"seed{seed}"
        assert row["git_commit"] == read_run_record(run_dir).git_commit
        assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", row["git_commit"]), row["git_commit"]
        assert (run_dir / "git.diff").exists() == row["git_commit"].endswith("-dirty")
    assert "- code: every run at git commit" in (out / "report.md").read_text()


def test_killed_sweep_resumes_to_same_results(main_sweep, killed_sweep):
    _, main_out = main_sweep
    _, _, out = killed_sweep
    assert_alibi_run_matches(out, main_out, abs=1e-6)
    log = (out / "pos_encoding=alibi" / "seed0" / "run.log").read_text()
    assert " start: " in log and " resume: " in log and "--ckpt_path=" in log
    assert "not resumable" not in log  # Lightning's warning, false here: the batches resume mid-epoch (cli.py)


def test_divergent_run_recorded_and_sweep_goes_on(killed_sweep):
    _, _, out = killed_sweep
    rows = by_run(read_rows(out))
    diverged = rows[("lr=1000.0", "0")]
    assert diverged["status"] == "diverged" and int(diverged["diverged_at_step"]) >= 0
    assert rows[("pos_encoding=alibi", "0")]["status"] == "done"
    assert "1 diverged" in (out / "report.md").read_text()


def test_failed_run_recorded_and_retried_only_on_request(killed_sweep):
    resumed, again, out = killed_sweep
    failed = by_run(read_rows(out))[("bad_bpe", "0")]
    # the CLI's one-line configuration error, which the ledger keeps as the run's error
    assert failed["status"] == "failed" and failed["error"].startswith("error: data: bpe vocab_size must be >=")
    assert resumed == again == sweep.RUNS_FAILED != 2  # failed runs: not the exit status of a bad spec
    log = (out / "bad_bpe" / "seed0" / "run.log").read_text()
    assert log.count("\n=== ") == 1  # the third invocation did not run it again
    assert len(read_rows(out)) == 3


def test_rerun_moves_old_runs_aside_and_runs_them_again(main_sweep, tmp_path, capsys):
    _, main_out = main_sweep
    out = tmp_path / "out"
    shutil.copytree(main_out, out, ignore=shutil.ignore_patterns("checkpoints"))
    spec, before = str(main_out.parent / "spec.yaml"), by_run(read_rows(out))

    assert sweep.main([spec, "--out", str(out), *THREADS, "--rerun", "pos_enc=alibi"]) == 2
    assert "no cell named pos_enc=alibi" in capsys.readouterr().err and not (out / "superseded").exists()

    assert sweep.main([spec, "--out", str(out), *THREADS, "--rerun", "pos_encoding=alibi"]) == 0
    (moved,) = (out / "superseded").iterdir()
    old = by_run(read_rows(moved))
    assert set(old) == {("pos_encoding=alibi", "0"), ("pos_encoding=alibi", "1")}
    assert (moved / "pos_encoding=alibi" / "seed1" / "run.json").exists()
    after = by_run(read_rows(out))
    for key in old:  # run again from scratch: one start in the new log, the same numbers (deterministic)
        assert (out / "pos_encoding=alibi" / f"seed{key[1]}" / "run.log").read_text().count("\n=== ") == 1
        for metric in METRICS:
            assert float(after[key][metric]) == pytest.approx(float(old[key][metric]), abs=1e-6), metric
    for key in before.keys() - old.keys():  # other cells untouched, their rows included
        assert after[key] == before[key]


def test_local_launcher_matches_the_pool(main_sweep, tiny_spec, tmp_path):
    """submitit's LocalExecutor jobs run the same commands as the pool: the same ledger, number for number."""
    _, main_out = main_sweep
    spec = tiny_spec(tmp_path / "spec.yaml", grid={"model.arch.pos_encoding": ["learned", "alibi"]}, seeds=[0])
    outcome = run_sweep(spec, tmp_path / "out", launcher="local", jobs=2, threads=1)
    out = outcome.out_dir
    assert outcome.waited and sorted(outcome.runs["done"]) == sorted(f"{cell}/seed0" for cell in CELLS)
    local, pool = by_run(read_rows(out)), by_run(read_rows(main_out))
    assert set(local) == {(cell, "0") for cell in CELLS}
    with (out / "results.csv").open(newline="") as f:
        columns = [c for c in next(csv.reader(f)) if c not in TIMINGS]  # the only columns that may differ
    assert {"val/loss", "val/loss@32", "train/loss", "params", "steps"} <= set(columns)
    for key, row in local.items():
        assert row["status"] == "done"
        assert {c: row[c] for c in columns} == {c: pool[key][c] for c in columns}, key
    assert len(list((out / "_submitit").glob("*_0_log.out"))) == 2  # one job per run
    assert not list(out.rglob("claim.json")) and not list(out.rglob("outcome.json"))


def test_warm_runs_match_fresh_processes(main_sweep, tiny_spec, tmp_path, monkeypatch):
    """The pool forks each run from a warm process by default; `--no-warm` starts each as a fresh
    interpreter. Same seed, same numbers to the last bit (results.csv as written; the checkpoint's weights
    and optimizer state), the same run.log line for line, the same files in every run folder."""
    _, main_out = main_sweep
    assert len(MAIN_WARM_STARTS) == 4 and all(isinstance(p, WarmProcess) for p in MAIN_WARM_STARTS)
    started = record_warm_starts(monkeypatch)
    spec = tiny_spec(tmp_path / "spec.yaml", grid={"model.arch.pos_encoding": ["learned", "alibi"]}, seeds=[0])
    out = run_sweep(spec, tmp_path / "out", threads=1, warm=False).out_dir
    assert started == []  # no warm process at all
    fresh, warm = by_run(read_rows(out)), by_run(read_rows(main_out))
    assert set(fresh) == {(cell, "0") for cell in CELLS}
    columns = [c for c in read_rows(out)[0] if c not in TIMINGS]
    for key, row in fresh.items():
        assert row["status"] == "done"
        assert {c: row[c] for c in columns} == {c: warm[key][c] for c in columns}, key
        fresh_dir, warm_dir = out / key[0] / "seed0", main_out / key[0] / "seed0"
        fresh_files, warm_files = run_folder(fresh_dir, out), run_folder(warm_dir, main_out)
        assert {"run.log", "run.json", "config.yaml", "events", "checkpoints/last.ckpt"} <= set(fresh_files)
        for name in fresh_files.keys() | warm_files.keys():  # one by one: a diff that says which file
            assert fresh_files.get(name) == warm_files.get(name), name
        assert read_run_record(fresh_dir).threads == 1


def test_terminated_sweep_stops_its_warm_run_and_resumes(main_sweep, tiny_spec, tmp_path):
    """SIGTERM to the sweep (a scheduler's preemption): the forked run is terminated (Lightning's
    graceful stop) and waited for, the warm process ends, nothing of the sweep is left running, the
    claim is released, exit status 130; the same command then resumes the run to the uninterrupted numbers."""
    spec = tiny_spec(tmp_path / "spec.yaml", cells=[{"model.arch.pos_encoding": "alibi"}], seeds=[0])
    out = tmp_path / "out"
    command = [sys.executable, "cli.py", "sweep", str(spec), "--out", str(out), *THREADS]
    output = tmp_path / "sweep.log"
    with output.open("w") as sink:
        first = subprocess.Popen(command, cwd=ROOT, start_new_session=True, stdout=sink, stderr=subprocess.STDOUT)
    run_dir = out / "pos_encoding=alibi" / "seed0"
    wait_for_checkpoint(first, run_dir / "checkpoints" / "last.ckpt")
    first.send_signal(signal.SIGTERM)  # the sweep alone: it stops its run itself
    assert first.wait(timeout=120) == 130
    assert "interrupted: stopping the runs" in output.read_text() and "warm start off" not in output.read_text()
    with pytest.raises(ProcessLookupError):  # no run, no warm process left in the sweep's session
        os.killpg(first.pid, 0)
    assert not (run_dir / "claim.json").exists()
    assert not (out / "results.csv").exists() or not read_rows(out)
    assert sweep.main(command[3:]) == 0
    assert_alibi_run_matches(out, main_sweep[1], abs=1e-6)
    log = (run_dir / "run.log").read_text()
    assert " start: " in log and " resume: " in log


def test_concurrent_sweeps_on_one_folder_train_each_run_once(tmp_path, tiny_spec):
    """The same sweep started twice at once: every run is claimed by one of them and trained once; the
    other skips it (not failed, not resumed), and the ledger ends complete."""
    spec = tiny_spec(tmp_path / "spec.yaml", grid={"model.arch.pos_encoding": ["learned", "alibi"]}, seeds=[0])
    out = tmp_path / "out"
    command = [sys.executable, "cli.py", "sweep", str(spec), "--out", str(out), *THREADS]
    logs = [tmp_path / f"sweep{i}.log" for i in range(2)]
    sweeps = [subprocess.Popen(command, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT) for log in logs]
    codes = [s.wait(timeout=600) for s in sweeps]
    outputs = [log.read_text() for log in logs]
    assert codes == [0, 0], outputs
    rows = by_run(read_rows(out))
    assert set(rows) == {(cell, "0") for cell in CELLS}
    assert all(row["status"] == "done" and row["steps"] == "12" for row in rows.values())
    for cell in CELLS:
        run_dir = out / cell / "seed0"
        assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1, cell
        log = (run_dir / "run.log").read_text()
        assert log.count("\n=== ") == 1 and " start: " in log, cell  # one attempt across both sweeps
        assert not (run_dir / "claim.json").exists()
    for output in outputs:  # a run left to the other sweep is reported as claimed, never as failed
        assert not [line for line in output.splitlines() if line.startswith("[sweep") and " failed" in line]
        assert output.count("skipping ") == output.count("claimed by ") // 2


@pytest.mark.slow  # tests/test_ddp.py resumes a killed DDP run, this file a killed sweep; make test-all
def test_ddp_sweep_killed_and_resumed_matches_one_process(main_sweep, tiny_spec, tmp_path):
    """A spec that trains each run on 2 processes (DDP on CPU, half the batch each) runs, survives a
    SIGKILL mid-run, resumes and reports like any other, with the single-process numbers."""
    ddp = {"trainer.strategy": "ddp", "trainer.devices": 2, "trainer.accelerator": "cpu", "data.batch_size": 4}
    spec = tiny_spec(tmp_path / "spec.yaml", more_fixed=ddp, cells=[{"model.arch.pos_encoding": "alibi"}], seeds=[0])
    out = tmp_path / "out"
    command = [sys.executable, "cli.py", "sweep", str(spec), "--out", str(out), *THREADS]
    first = subprocess.Popen(
        command, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    run_dir = out / "pos_encoding=alibi" / "seed0"
    wait_for_checkpoint(first, run_dir / "checkpoints" / "last.ckpt")
    os.killpg(first.pid, signal.SIGKILL)  # the sweep, its launcher and both training processes
    first.wait()
    assert read_run_record(run_dir).status == "running", "finished before the kill"
    assert sweep.main(command[3:]) == 0
    assert_alibi_run_matches(out, main_sweep[1], rel=1e-4)
    assert read_run_record(run_dir).processes == 2
    assert (out / "report.md").exists()
