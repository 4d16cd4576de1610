"""`cli.py report`'s own lines: the TensorBoard command a user can paste, and a run folder passed for its sweep."""

from __future__ import annotations

import sys
from pathlib import Path

from experiments.records.layout import LEDGER_NAME, SWEEP_INFO
from tools import report


def test_the_tensorboard_command_names_the_venvs_tensorboard_when_it_is_not_on_path(tmp_path, monkeypatch):
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    (python.parent / "tensorboard").touch()
    monkeypatch.setattr(sys, "executable", str(python))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert report.tensorboard_command(Path("runs/x/_summary")) == "venv/bin/tensorboard --logdir runs/x/_summary"
    (python.parent / "tensorboard").unlink()  # none beside it: the plain command
    assert report.tensorboard_command("runs/x/_summary") == "tensorboard --logdir runs/x/_summary"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "tensorboard").touch(mode=0o755)  # on PATH: the plain command
    (python.parent / "tensorboard").touch()
    assert report.tensorboard_command("d") == "tensorboard --logdir d"


def test_a_run_folder_is_refused_with_its_sweep_folder_named(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    run = sweep / "norm=rmsnorm" / "seed0"
    run.mkdir(parents=True)
    (sweep / LEDGER_NAME).write_text("cell,seed,status\n")
    assert report.main([str(run.parent)]) == 2
    err = capsys.readouterr().err
    assert f"is inside the sweep folder {sweep.resolve()}; pass that" in err


def test_a_folder_that_is_not_a_sweep_says_what_to_pass_or_run(tmp_path, capsys):
    assert report.main([str(tmp_path / "nowhere")]) == 2
    assert f"{tmp_path / 'nowhere'} does not exist; pass a sweep folder" in capsys.readouterr().err
    assert report.main([str(tmp_path)]) == 2
    assert (
        f"{tmp_path} is not a sweep folder; `cli.py sweep SPEC --out {tmp_path}` makes one" in capsys.readouterr().err
    )
    (tmp_path / SWEEP_INFO).write_text("{}")  # started, no run ended yet
    assert report.main([str(tmp_path)]) == 2
    assert "no run of the sweep in" in capsys.readouterr().err
