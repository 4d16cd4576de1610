"""The CLI validates ablation flags and links data-dependent values into the model (its error
messages: `tests/test_errors.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cli import cli_main

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
GPT = ["-c", str(CONFIGS / "gpt/base.yaml"), "-c", str(CONFIGS / "gpt/tiny.yaml")]


def test_invalid_axis_value_lists_choices(capsys):
    with pytest.raises(SystemExit):
        cli_main(["fit", *GPT, "--model.arch.norm", "batchnorm"])
    err = capsys.readouterr().err
    assert "batchnorm" in err and "rmsnorm" in err and "layernorm" in err


def test_invalid_combination_names_field(capsys):
    with pytest.raises(SystemExit) as info:
        cli_main(["fit", *GPT, "--model.arch.n_heads", "5", "--trainer.fast_dev_run", "1"])
    assert info.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == "error: model.arch: d_model=64 is not divisible by n_heads=5; choose n_heads among " + (
        "1, 2, 4, 8, 16, 32, 64"
    )


# one saved config.yaml per committed sweep: the parser's stricter rules (no abbreviations) still accept them
SAVED = {p.parents[2]: p for p in sorted(ROOT.glob("experiments/studies/*/results/*/*/seed*/config.yaml"))}


@pytest.mark.parametrize("saved", SAVED.values(), ids=lambda p: p.parents[2].name)
def test_committed_run_configs_still_parse(saved, capsys):
    with pytest.raises(SystemExit) as info:
        cli_main(["fit", "--config", str(saved), "--print_config"])
    assert info.value.code in (None, 0)
    assert yaml.safe_load(capsys.readouterr().out)["model"]["class_path"].startswith("lit_modules.")


def test_vocab_size_linked_from_data(tmp_path):
    cli = cli_main(
        [*GPT[:0], *GPT, "--trainer.fast_dev_run", "1", "--trainer.default_root_dir", str(tmp_path)], run=False
    )
    assert cli.model.model.cfg.vocab_size == cli.datamodule.vocab_size
    assert cli.model.data_info["seq_len"] == cli.datamodule.seq_len


def test_lightnings_service_tips_are_dropped_and_its_other_lines_kept(tmp_path):
    """Every run printed two `💡 Tip:` adverts for Lightning's hosted services; its other info lines stay."""
    import logging

    cli_main([*GPT, "--trainer.fast_dev_run", "1", "--trainer.default_root_dir", str(tmp_path)], run=False)
    emitter = logging.getLogger("lightning.pytorch.utilities.rank_zero")  # where rank_zero_info logs

    def shown(message: str) -> bool:
        return bool(emitter.filter(logging.LogRecord(emitter.name, logging.INFO, "", 0, message, None, None)))

    assert not shown("💡 Tip: For seamless cloud logging and experiment tracking, try installing [litlogger]")
    assert shown("GPU available: False, used: False")


def test_help_lists_the_suites_tools_and_a_misspelt_command_gets_a_suggestion(capsys):
    import cli

    with pytest.raises(SystemExit):  # LightningCLI's own help follows the suite's list, then exits 0
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert all(f"python cli.py {tool}" in out for tool in cli.TOOLS) and "--print_config" in out
    assert cli.main(["swep", "x.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("error: unknown command 'swep'; did you mean sweep?") and "python cli.py report" in err
    assert cli.main([]) == 2
    assert capsys.readouterr().err.strip().endswith("error: a command is needed")
