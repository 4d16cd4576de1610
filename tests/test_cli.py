"""The CLI validates ablation flags and links data-dependent values into the model."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli import cli_main

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
GPT = ["-c", str(CONFIGS / "gpt/base.yaml"), "-c", str(CONFIGS / "gpt/tiny.yaml")]


def test_invalid_axis_value_lists_choices(capsys):
    with pytest.raises(SystemExit):
        cli_main(["fit", *GPT, "--model.arch.norm", "batchnorm"])
    err = capsys.readouterr().err
    assert "batchnorm" in err and "rmsnorm" in err and "layernorm" in err


def test_invalid_combination_names_field(capsys):
    with pytest.raises((SystemExit, ValueError)) as info:
        cli_main(["fit", *GPT, "--model.arch.n_heads", "5", "--trainer.fast_dev_run", "1"])
    text = capsys.readouterr().err + str(info.value)
    assert "n_heads" in text


def test_vocab_size_linked_from_data(tmp_path):
    cli = cli_main(
        [*GPT[:0], *GPT, "--trainer.fast_dev_run", "1", "--trainer.default_root_dir", str(tmp_path)], run=False
    )
    assert cli.model.model.cfg.vocab_size == cli.datamodule.vocab_size
    assert cli.model.data_info["seq_len"] == cli.datamodule.seq_len
