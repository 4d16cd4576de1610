"""`cli.py sweep` before any run: a bad value or a bad spec fails with one line and writes nothing,
`--dry-run` prints one command per run, and cell names are short and unique. Real sweeps are in
test_sweep_runs.py."""

from __future__ import annotations

import pytest
import yaml

from experiments.sweep.spec import SpecError, load_spec
from tools import sweep


def test_bad_value_fails_before_any_run(tmp_path, tiny_spec, capsys):
    spec = tiny_spec(tmp_path / "spec.yaml", grid={"model.arch.pos_encoding": ["learned", "sinusoidl"]})
    assert sweep.main([str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "pos_encoding" in err and "sinusoidl" in err and "'alibi'" in err and "'rope'" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "entries, expected",
    [
        ({"grid": {"model.arch.norm": ["layernorm"]}, "sweeps": 1}, ["sweeps", "valid keys", "grid"]),
        ({"cells": [{"model.optim.lr": 0.003}, {"name": "tiny_default"}]}, ["same configuration", "tiny_default"]),
        ({"grid": {"model.arch.n_heads": [3]}}, ["n_heads", "divisible"]),
        ({"grid": {"model.arch.norm": ["layernorm"]}, "base": ["configs/gpt/nope.yaml"]}, ["not found", "nope.yaml"]),
        ({"grid": {"trainer.max_steps": [5]}}, ["fixed and varied", "trainer.max_steps"]),
        (
            {"grid": {"model.arch.norm": ["layernorm"]}, "more_fixed": {"trainer.max_step": 5}},
            ["trainer.max_step: unknown key; did you mean trainer.max_steps? (keys are not abbreviated)"],
        ),
        (
            {"grid": {"model.arch.pos_enc": ["rope"]}},
            ["model.arch.pos_enc: unknown key; did you mean model.arch.pos_encoding?"],
        ),
        ({"grid": {"data.batch_sise": [4]}}, ["data.batch_sise: unknown key; did you mean data.batch_size?"]),
        (
            {"grid": {"model.arch.norm": ["layernorm"]}, "more_fixed": {"max_steps": 5}},
            ["max_steps: unknown key; did you mean trainer.max_steps?"],
        ),
        ({"grid": {"model.arch.norm": ["layernorm"]}, "seed": [0]}, ["['seed']; did you mean 'seeds'?; valid keys"]),
        ({"grid": {"model.arch.norm": ["batchnorm"]}}, ["model.arch.norm: 'batchnorm' is not valid; choose one of"]),
        (
            {
                "grid": {"model.arch.norm": ["layernorm"]},
                "more_fixed": {"data.corpus": "files", "data.train_files": "runs/nope.txt"},
            },
            ["data.train_files: runs/nope.txt does not exist (paths are relative to"],
        ),
        (
            {
                "grid": {"model.arch.norm": ["layernorm"]},
                "more_fixed": {"data.corpus": "files", "data.train_files": ["runs/nope/*.txt"]},
            },
            ["data.train_files: the glob 'runs/nope/*.txt' matches no file"],
        ),
    ],
    ids=[
        "unknown-key",
        "cells-identical",
        "invalid-combination",
        "missing-base",
        "fixed-and-varied",
        "abbreviated-fixed-key",
        "abbreviated-axis",
        "misspelt-key",
        "key-without-its-group",
        "misspelt-top-level-key",
        "bad-choice",
        "missing-data-file",
        "empty-data-glob",
    ],
)
def test_bad_spec_fails_before_any_run(tmp_path, tiny_spec, capsys, entries, expected):
    spec = tiny_spec(tmp_path / "spec.yaml", **entries)
    assert sweep.main([str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert all(word in err for word in expected), err
    # one line, said once; nothing written: no ledger or sweep.json keeps a misspelt key
    assert err.count("error:") == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_dry_run_prints_one_command_per_run(tmp_path, tiny_spec, capsys):
    spec = tiny_spec(tmp_path / "spec.yaml", grid={"model.arch.pos_encoding": ["rope", "alibi", "none"]}, seeds=[3, 4])
    assert sweep.main([str(spec), "--out", str(tmp_path / "out"), "--dry-run", "--jobs", "2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 6
    for line in lines:
        assert line.startswith("cd ") and "OMP_NUM_THREADS=" in line and " cli.py fit -c configs/gpt/base.yaml" in line
        assert " SUITE_PROGRESS=lines " in line  # progress lines, not a bar, in every run's log
    assert sum("--seed_everything=4" in line and "--data.init_args.seed=4" in line for line in lines) == 3
    assert not (tmp_path / "out").exists()


def test_cell_names_are_short_and_unique(tmp_path, tiny_spec):
    grid = {"model.optim.lr": [0.001, "1e-2"], "model.arch.norm": ["rmsnorm"], "trainer.gradient_clip_val": [0.5]}
    spec = load_spec(tiny_spec(tmp_path / "spec.yaml", grid=grid, baseline={"model.optim.lr": "1e-2"}))
    assert [c.name for c in spec.cells] == [
        "lr=0.001,norm=rmsnorm,gradient_clip_val=0.5",
        "lr=1e-2,norm=rmsnorm,gradient_clip_val=0.5",
    ]
    assert spec.baseline == "lr=1e-2,norm=rmsnorm,gradient_clip_val=0.5"
    with pytest.raises(SpecError, match="several cells"):
        load_spec(
            tiny_spec(tmp_path / "spec.yaml", grid={"model.optim.lr": [1, 2], "x.y": [1, 2]}, baseline={"x.y": 1})
        )


def test_a_cells_error_names_the_line_of_the_setting_in_the_file_that_wrote_it(tmp_path, tiny_spec, capsys):
    parent = tiny_spec(tmp_path / "parent.yaml", grid={"model.arch.norm": ["layernorm", "groupnorm"]})
    grid_line = parent.read_text().splitlines().index("  model.arch.norm:") + 1
    (tmp_path / "misspelt.yaml").write_text("extends: parent.yaml\nfixed:\n  model.arch.activaton: relu\n")
    (tmp_path / "fine.yaml").write_text("extends: parent.yaml\nseeds: [3]\n")
    for name, where, message in [
        ("misspelt.yaml", "misspelt.yaml:3", "model.arch.activaton: unknown key"),  # the extending file's line
        ("fine.yaml", f"parent.yaml:{grid_line}", "model.arch.norm: 'groupnorm' is not valid"),  # the extended one's
    ]:
        assert sweep.main([str(tmp_path / name), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert f"({tmp_path / where}): {message}" in err, err


def test_a_data_folder_under_home_is_found_as_the_runs_find_it(tmp_path, tiny_spec, monkeypatch, capsys):
    """`data_dir: ~/...` is expanded by the DataModules, so the check before the runs expands it too."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "shakespeare").mkdir()
    data = {"data.corpus": "tinyshakespeare", "data.data_dir": "~/shakespeare"}
    spec = tiny_spec(tmp_path / "spec.yaml", grid={"model.arch.norm": ["layernorm"]}, more_fixed=data)
    assert sweep.main([str(spec), "--out", str(tmp_path / "out"), "--dry-run"]) == 0, capsys.readouterr().err
    (tmp_path / "shakespeare").rmdir()
    assert sweep.main([str(spec), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    assert "data.data_dir: ~/shakespeare does not exist" in capsys.readouterr().err


def test_a_scheme_the_family_lacks_fails_before_any_run(tmp_path, capsys):
    """ViT has no rope/alibi/t5: the model class's own check (`check_arguments`) runs in the parse-only check."""
    spec = tmp_path / "spec.yaml"
    vit = {
        "base": ["configs/vit/base.yaml", "configs/vit/tiny.yaml"],
        "grid": {"model.arch.pos_encoding": ["learned", "alibi"]},
    }
    spec.write_text(yaml.safe_dump(vit))
    assert sweep.main([str(spec), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "cell 'pos_encoding=alibi'" in err, err
    assert "model: pos_encoding='alibi' is not supported by ViT; choose one of 'learned', 'sinusoidal', 'none'" in err
    assert not (tmp_path / "out").exists()
