"""A full disk ends a command in one line and loses nothing (`contract.disk`): a run whose checkpoint or events
cannot be written, a token store that cannot be built, a sweep whose run and ledger hit it. The disk fills by
injection (`tests/full_disk.py`: writes under a folder fail with ENOSPC from a given write on); freeing it (the
state file removed) lets the same command complete."""

from __future__ import annotations

import csv
import errno
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import cli
from contract.disk import disk_full_line
from contract.run_record import read_run_record
from tests.conftest import write_spec
from tests.full_disk import Disk, environment, install

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ["-c", "configs/gpt/base.yaml", "-c", "configs/gpt/tiny.yaml"]
TINY = ["--model.arch.d_model=32", "--model.arch.n_layers=1", "--model.sample_tokens=0", "--data.seq_len=16",
        "--data.batch_size=8", "--data.val_tokens=256", "--data.eval_lengths=[16]", "--trainer.max_steps=4",
        "--trainer.val_check_interval=2", "--trainer.num_sanity_val_steps=0", "--trainer.enable_model_summary=false",
        "--trainer.enable_progress_bar=false"]  # fmt: skip


def _fit_args(out: Path) -> list[str]:
    checkpoint = {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                  "init_args": {"dirpath": str(out / "run/checkpoints"), "every_n_train_steps": 2, "save_last": True,
                                "save_top_k": 0}}  # fmt: skip
    return ["fit", *CONFIGS, *TINY, f"--trainer.logger.init_args.save_dir={out}", "--trainer.logger.init_args.name=run",
            "--trainer.logger.init_args.version=", f"--trainer.callbacks+={json.dumps(checkpoint)}"]  # fmt: skip


@pytest.mark.parametrize(
    "fills",
    [
        dict(larger_than=100_000),  # the first checkpoint (225 kB in one write of its temporary file)
        dict(after="events.out.tfevents"),  # TensorBoard's events, written by its own thread
    ],
    ids=["checkpoint", "events"],
)
def test_a_run_ends_in_one_line_and_the_same_command_completes(fills, tmp_path, capsys, monkeypatch):
    """Neither write names its file (a failed `write()` names none): the line names the run's folder."""
    monkeypatch.chdir(ROOT)
    out, state = tmp_path / "out", tmp_path / "full"
    monkeypatch.setattr(tempfile, "tempdir", str(out))  # the checkpoint's temporary file is on the full disk too
    out.mkdir()
    undo = install(Disk(out, state, **fills))
    try:
        assert cli.main(_fit_args(out)) == 1
    finally:
        undo()
    assert state.exists()  # the disk did fill
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[-1] == (
        f"error: no space left on device writing {out / 'run'} (0 B free there): free space "
        "on that disk, or write elsewhere, and run the same command again"
    )
    state.unlink()  # space freed
    assert cli.main(_fit_args(out)) == 0
    assert read_run_record(out / "run").status == "done"


def test_a_token_store_that_does_not_fit_leaves_nothing_behind(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    (tmp_path / "a.txt").write_text("to be or not to be, that is the question\n" * 400)
    cache, state = tmp_path / "cache", tmp_path / "full"
    flags = ["--data.corpus=files", f"--data.train_files=[{tmp_path}/a.txt]", f"--data.cache_dir={cache}",
             "--data.tokenizer=bpe", "--data.bpe_vocab_size=300"]  # fmt: skip
    undo = install(Disk(cache, state, after="train.bin"))
    try:
        assert cli.main(["prepare", *CONFIGS, *flags]) == 1
    finally:
        undo()
    line = capsys.readouterr().err.splitlines()[-1]
    stores = cache / "token_stores"
    assert line.startswith(f"error: no space left on device writing {stores}/") and "(0 B free there)" in line
    assert [p.name for p in stores.iterdir() if p.is_dir()] == []  # the half-built folder is gone
    state.unlink()
    assert cli.main(["prepare", *CONFIGS, *flags]) == 0
    assert "(built now)" in capsys.readouterr().out


def _rows(out: Path) -> dict[str, dict[str, str]]:
    with (out / "results.csv").open(newline="") as f:
        return {row["cell"]: row for row in csv.DictReader(f)}


def test_a_sweep_stops_in_three_lines_and_the_same_command_completes(tmp_path):
    """A sweep's second run fills the disk writing its run.json: that run ends with its one line, the sweep
    records nothing more (the ledger is on that disk too), launches no further run and ends with its own line, in
    a separate process as a user runs it (its runs forked from the warm process, which has the full disk too); the
    first run's row and folder stay readable, and once there is space the same command runs the rest."""
    spec = write_spec(tmp_path / "spec.yaml", grid={"model.arch.pos_encoding": ["learned", "alibi", "rope"]})
    out, state = tmp_path / "out", tmp_path / "full"
    command = [sys.executable, "cli.py", "sweep", str(spec), "--out", str(out), "--threads", "1"]
    disk = Disk(out, state, after="pos_encoding=alibi/seed0/.run.json")
    env = environment(disk, ROOT)
    first = subprocess.run(command, cwd=ROOT, env=os.environ | env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 1 and state.exists()
    assert "Traceback" not in first.stdout + first.stderr
    # after the run starts: its own line (echoed on stdout), the sweep's progress line saying it, the sweep's line
    errors, outputs = first.stderr.splitlines(), first.stdout.splitlines()
    started = next(i for i, line in enumerate(errors) if "starting pos_encoding=alibi/seed0" in line)
    run_json, ledger = out / "pos_encoding=alibi/seed0/run.json", out / "results.csv"
    run_line = (f"error: no space left on device writing {run_json} (0 B free there): free space on that disk, or "
                "write elsewhere, and run the same command again")  # fmt: skip
    assert outputs[-1] == run_line and outputs[-2].startswith("done: step 12/12")  # the first run's last line
    assert len(errors[started + 1 :]) == 2
    assert errors[started + 1].startswith(f"[sweep 2/3] pos_encoding=alibi/seed0 failed: {run_line} · ETA")
    assert errors[-1] == (
        f"error: no space left on device: the sweep stopped at pos_encoding=alibi/seed0, writing {ledger} (0 B free "
        "there); free space on that disk and run the same command again: the runs that ended are kept and the rest "
        "resume from their last checkpoints"
    )
    assert "rope" not in first.stderr  # no run launched after it
    rows = _rows(out)
    assert list(rows) == ["pos_encoding=learned"] and rows["pos_encoding=learned"]["status"] == "done"
    learned = dict(rows["pos_encoding=learned"])
    assert read_run_record(out / "pos_encoding=learned/seed0").status == "done"

    state.unlink()  # space freed (and no more filling): the same command
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    rows = _rows(out)
    assert {cell: row["status"] for cell, row in rows.items()} == dict.fromkeys(
        ["pos_encoding=learned", "pos_encoding=alibi", "pos_encoding=rope"], "done"
    )
    assert rows["pos_encoding=learned"] == learned  # undisturbed


def test_cli_says_a_full_disk_in_one_line_and_exits_1(tmp_path, capsys, monkeypatch):
    """Any command: a tool whose write fails for lack of space (here `report`, writing its report)."""
    from tools import report

    def full(argv):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "report.md"))

    monkeypatch.setattr(report, "main", full)
    assert cli.main(["report", str(tmp_path)]) == 1
    line = disk_full_line(OSError(errno.ENOSPC, "", str(tmp_path / "report.md")))
    assert capsys.readouterr().err.splitlines() == [line]
    assert line.startswith(f"error: no space left on device writing {tmp_path}/report.md (")
    monkeypatch.setenv("SUITE_DEBUG", "1")  # the traceback, on request
    with pytest.raises(OSError):
        cli.main(["report", str(tmp_path)])
