"""`cli.py samples DIR`: one prediction per cell of a real tiny sweep, every cell on the same input, the runs'
training configs untouched."""

from __future__ import annotations

import json

from experiments.sweep import run_sweep
from lit_modules.prediction_writer import PREDICTIONS_FILE
from tools import samples

CELLS = ("pos_encoding=alibi", "pos_encoding=rope")


def test_one_sample_per_cell_on_the_same_input(tmp_path, tiny_spec, capsys):
    spec = tiny_spec(tmp_path / "spec.yaml", {"trainer.max_steps": 2, "trainer.val_check_interval": 2},
                     grid={"model.arch.pos_encoding": ["alibi", "rope"]}, seeds=[0])  # fmt: skip
    out = run_sweep(spec, tmp_path / "out", threads=1).out_dir
    configs = {cell: (out / cell / "seed0" / "config.yaml").read_text() for cell in CELLS}
    capsys.readouterr()

    assert samples.main([str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    records = {
        cell: json.loads((out / cell / "seed0" / PREDICTIONS_FILE).read_text().splitlines()[0]) for cell in CELLS
    }
    assert records[CELLS[0]]["input"] == records[CELLS[1]]["input"]  # the data's first default prompt
    assert printed[-3] == f"input: {records[CELLS[0]]['input']!r}"
    for line, cell in zip(printed[-2:], CELLS):  # in the spec's order, each with its continuation
        assert line.split()[0] == cell and records[cell]["output"].replace("\n", "⏎")[:20].strip() in line
    assert {cell: (out / cell / "seed0" / "config.yaml").read_text() for cell in CELLS} == configs

    assert samples.main([str(out), "--prompt", "def f("]) == 0
    assert "input: 'def f('" in capsys.readouterr().out


def test_a_folder_without_checkpoints_is_an_error(tmp_path, capsys):
    assert samples.main([str(tmp_path)]) == 2
    assert "run the sweep first" in capsys.readouterr().out
