"""A mistake in what a run asks for ends `cli.py fit/validate/test` in two lines, a usage hint and
`error: <key>: <problem and fix>`, with exit status 2 and no traceback (`SUITE_DEBUG=1` shows it);
an abbreviated or misspelt key is an error that names the full key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import cli

ROOT = Path(__file__).resolve().parent.parent
GPT = ["-c", str(ROOT / "configs/gpt/base.yaml"), "-c", str(ROOT / "configs/gpt/tiny.yaml")]
VIT = ["-c", str(ROOT / "configs/vit/base.yaml"), "-c", str(ROOT / "configs/vit/tiny.yaml")]


def error_lines(argv: list[str], capsys) -> list[str]:
    """Runs the entry point in this process; returns its stderr lines, checked for the common form."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip() and line != "Seed set to 0"]
    assert "Traceback" not in "\n".join(lines)
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"usage: cli.py {argv[0]} ") and "--help" in lines[0]
    assert lines[1].startswith("error: ")
    return lines


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["fit", "-c", str(ROOT / "configs/gpt/tiny.yaml"), "--model.arch.pos_encoding", "alibi"],
            "error: model.arch.d_model: unknown key; no model class is set, and its keys come with it: give the "
            "family's base config first, -c configs/<family>/base.yaml -c <the overlay>",
        ),
        (
            ["fit", *GPT, "--model.arch.norm", "batchnorm"],
            "error: model.arch.norm: 'batchnorm' is not valid; choose one of 'layernorm', 'rmsnorm'",
        ),
        (
            ["fit", *GPT, "--model.arch.d_model", "100", "--model.arch.n_heads", "3"],
            "error: model.arch: d_model=100 is not divisible by n_heads=3; "
            "choose n_heads among 1, 2, 4, 5, 10, 20, 25, 50, 100",
        ),
        (
            ["validate", *GPT, "--model.arch.n_kv_heads", "3"],
            "error: model.arch: n_heads=4 is not divisible by n_kv_heads=3; choose n_kv_heads among 1, 2, 4",
        ),
        (["test", *GPT, "--trainer.max_steps", "many"], "error: trainer.max_steps: expected int, got 'many'"),
        (
            ["fit", "-c", str(ROOT / "configs/gpt/nope.yaml")],
            f"error: config: File does not exist: '{ROOT / 'configs/gpt/nope.yaml'}'",
        ),
        (
            ["fit", *VIT, "--model.arch.pos_encoding", "rope"],
            "error: model: pos_encoding='rope' is not supported by ViT; choose one of 'learned', 'sinusoidal', 'none'",
        ),
        (
            ["fit", *GPT, "--trainer.max_step=5"],
            "error: trainer.max_step: unknown key; did you mean trainer.max_steps? (keys are not abbreviated)",
        ),
        (
            ["fit", *GPT, "--model.arch.d_mode", "64"],
            "error: model.arch.d_mode: unknown key; did you mean model.arch.d_model?",
        ),
        (["fit", *GPT, "--data.batch_sise", "8"], "error: data.batch_sise: unknown key; did you mean data.batch_size?"),
    ],
    ids=[
        "overlay-without-base",
        "bad-choice",
        "bad-combination",
        "bad-gqa-validate",
        "bad-type-test",
        "missing-config",
        "vit-rope",
        "abbreviated-key",
        "abbreviated-nested-key",
        "misspelt-key",
    ],
)
def test_bad_input_says_what_to_do_in_two_lines(argv, expected, capsys):
    assert expected in error_lines(argv, capsys)[1]


@pytest.mark.parametrize(
    "value, expected",
    [("0", "error: data.batch_size: 0 must be a positive integer"),
     ("-2", "error: data.batch_size: -2 must be a positive integer")],
)  # fmt: skip
def test_a_value_constraint_is_checked_where_the_config_is_parsed(value, expected, capsys, monkeypatch):
    """Refused by the parser, before any DataModule or model is built (no model summary printed first)."""
    import lit_modules.suite_cli

    monkeypatch.setattr(lit_modules.suite_cli.SuiteCLI, "instantiate_classes", lambda self: pytest.fail("built"))
    assert error_lines(["fit", *GPT, "--data.batch_size", value], capsys)[1] == expected
    assert error_lines(["fit", *GPT, "--data.num_workers", "-1"], capsys)[1] == (
        "error: data.num_workers: -1 must be 0 or more"
    )


def test_a_combination_the_family_refuses_is_checked_where_the_config_is_parsed(capsys, monkeypatch):
    """ViT's own constraints (`ImageClassifier.check_arguments`), before any DataModule or model is built: a sweep's
    parse-only check refuses the cell too."""
    import lit_modules.suite_cli

    monkeypatch.setattr(lit_modules.suite_cli.SuiteCLI, "instantiate_classes", lambda self: pytest.fail("built"))
    line = error_lines(["fit", *VIT, "--model.arch.pos_encoding", "alibi"], capsys)[1]
    assert line.startswith("error: model: pos_encoding='alibi' is not supported by ViT; choose one of 'learned'")
    layout = ["--model.learned_layout", "2d", "--model.arch.pos_encoding", "sinusoidal"]
    assert error_lines(["fit", *VIT, *layout], capsys)[1].startswith(
        "error: model: learned_layout='2d' shapes a learned table, but pos_encoding='sinusoidal'"
    )


def _not_a_checkpoint(tmp_path: Path) -> Path:
    (tmp_path / "notes.ckpt").write_text("notes, not a checkpoint")
    return tmp_path / "notes.ckpt"


@pytest.mark.parametrize(
    "subcommand, key",
    [("validate", "--ckpt_path"), ("test", "--ckpt_path"), ("fit", "--ckpt_path"), ("fit", "--model.init_from")],
)
def test_a_checkpoint_that_is_missing_a_folder_or_not_a_checkpoint_is_one_line(
    subcommand, key, tmp_path, capsys, monkeypatch
):
    import lit_modules.suite_cli

    monkeypatch.setattr(lit_modules.suite_cli.SuiteCLI, "instantiate_classes", lambda self: pytest.fail("built"))
    name = key.lstrip("-")
    missing = error_lines([subcommand, *GPT, key, str(tmp_path / "nope.ckpt")], capsys)[1]
    assert missing == f"error: {name}: {tmp_path / 'nope.ckpt'} does not exist; give a checkpoint: a run's " + (
        "RUN/checkpoints/*.ckpt, or a .pt that torch.save wrote"
    )
    if key == "--ckpt_path":  # init_from takes a reference model's folder (read_weights checks its config.json)
        folder = error_lines([subcommand, *GPT, key, str(tmp_path)], capsys)[1]
        assert folder.startswith(f"error: {name}: {tmp_path} is a folder; give a checkpoint")
    corrupt = error_lines([subcommand, *GPT, key, str(_not_a_checkpoint(tmp_path))], capsys)[1]
    assert corrupt.startswith(f"error: {name}: {tmp_path / 'notes.ckpt'} is not a checkpoint (torch.save writes a zip")


def test_abbreviated_key_in_a_config_file(tmp_path, capsys):
    (tmp_path / "typo.yaml").write_text("model:\n  init_args:\n    optim:\n      l: 0.1\n")
    line = error_lines(["fit", *GPT, "-c", str(tmp_path / "typo.yaml")], capsys)[1]
    assert line == "error: model.optim.l: unknown key; did you mean model.optim.lr? (keys are not abbreviated)"


def test_missing_data_file(tmp_path, capsys):
    argv = ["fit", *GPT, "--data.corpus", "tinyshakespeare", "--data.data_dir", str(tmp_path)]
    line = error_lines(argv, capsys)[1]
    assert line.startswith(f"error: data: {tmp_path / 'input.txt'} not found") and "curl -L -o" in line


def test_corrupt_data_file(tmp_path, capsys):
    (tmp_path / "input.txt").write_text("not the tiny shakespeare corpus\n")
    argv = ["fit", *GPT, "--data.corpus", "tinyshakespeare", "--data.data_dir", str(tmp_path)]
    line = error_lines(argv, capsys)[1]
    assert line.startswith(f"error: data: checksum mismatch for {tmp_path / 'input.txt'}")
    assert "delete it to download it again" in line


def test_dataset_missing_when_the_run_prepares_it(tmp_path, capsys):
    """Image DataModules read their files in prepare_data, once the run has started: still two lines
    (after Lightning's own start-up lines), the last one naming the folder and how to get the data."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        cli.main(
            [
                "fit",
                "-c",
                str(ROOT / "configs/vit/base.yaml"),
                "-c",
                str(ROOT / "configs/vit/cifar10.yaml"),
                "--data.data_dir",
                str(tmp_path),
                "--trainer.logger.init_args.save_dir",
                str(tmp_path / "runs"),
            ]
        )
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    usage, error = err.strip().splitlines()[-2:]
    assert usage.startswith("usage: cli.py fit ")
    assert error.startswith(f"error: data: cifar10 not found under data_dir {tmp_path}")
    assert "Leave data_dir unset to download it" in error


def test_a_bug_keeps_its_traceback(monkeypatch):
    """Only the suite's configuration errors are shortened: an unexpected exception stays as it is."""
    import datamodules.text

    def broken(*args, **kwargs):
        raise TypeError("a bug")

    monkeypatch.setitem(datamodules.text.CORPORA, "default", broken)
    with pytest.raises(Exception) as info:  # not SystemExit
        cli.main(["fit", *GPT])
    chain = [info.value]
    while chain[-1].__cause__ or chain[-1].__context__:
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
    assert any(isinstance(e, TypeError) and str(e) == "a bug" for e in chain)


def test_an_error_in_training_keeps_its_traceback(monkeypatch, tmp_path):
    """Once the run has started, only what the DataModule raises is shortened (its files)."""
    import lit_modules

    def broken(self, batch, batch_idx):
        raise ValueError("a bug in training")

    monkeypatch.setattr(lit_modules.CausalLM, "training_step", broken)
    with pytest.raises(ValueError, match="a bug in training"):
        cli.main(["fit", *GPT, "--trainer.fast_dev_run", "1", "--trainer.default_root_dir", str(tmp_path)])


def _run(argv: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "cli.py", *argv], cwd=ROOT, capture_output=True, text=True, env=os.environ | env, timeout=300
    )


def test_the_command_line_prints_no_traceback_and_exits_2():
    done = _run(["fit", *GPT, "--model.arch.d_model", "100", "--model.arch.n_heads", "3"])
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) <= 3 and "Traceback" not in done.stderr  # at most Lightning's "Seed set to 0" besides
    assert lines[-1] == (
        "error: model.arch: d_model=100 is not divisible by n_heads=3; "
        "choose n_heads among 1, 2, 4, 5, 10, 20, 25, 50, 100"
    )


def test_suite_debug_shows_the_traceback():
    done = _run(["fit", *GPT, "--model.arch.norm", "batchnorm"], SUITE_DEBUG="1")
    assert done.returncode == 1
    assert "Traceback" in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "contract.errors.ConfigError: model.arch.norm: 'batchnorm' is not valid; choose one of 'layernorm', 'rmsnorm', "
        "'dyt'"
    )
