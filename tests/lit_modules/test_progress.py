"""Progress in a log or a pipe: one line per validation (`LineProgress`), not a live bar's redraws;
a terminal (or `SUITE_PROGRESS=bar`) keeps the bar, and the choice never enters the saved config."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from lightning.pytorch.callbacks import ProgressBar

from contract.run_folder import PROGRESS_LINES, PROGRESS_VAR
from experiments.sweep import runs
from lit_modules import progress
from lit_modules.progress import LineProgress, wants_lines
from lit_modules.suite_cli import cli_main

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TINY = [
    "-c", str(CONFIGS / "gpt/base.yaml"), "-c", str(CONFIGS / "gpt/tiny.yaml"),
    "--model.arch.d_model=32", "--model.arch.n_layers=1", "--model.sample_tokens=0",
    "--data.seq_len=16", "--data.batch_size=8", "--data.val_tokens=256", "--data.eval_lengths=[16]",
    "--trainer.enable_model_summary=false",
]  # fmt: skip


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    "setting, stdout, lines",
    [("lines", Terminal(), True), ("bar", io.StringIO(), False), ("", Terminal(), False), ("", io.StringIO(), True)],
    ids=["lines-on-a-terminal", "bar-in-a-pipe", "auto-terminal", "auto-pipe"],
)
def test_lines_unless_a_terminal_or_asked(monkeypatch, setting, stdout, lines):
    monkeypatch.setenv(PROGRESS_VAR, setting)
    monkeypatch.setattr(progress.sys, "stdout", stdout)
    assert wants_lines() is lines


def test_sweep_runs_ask_for_lines():
    env = runs.Run("c", 0, Path("/tmp/sweep/c/seed0"), (), 1).env()
    assert env[PROGRESS_VAR] == PROGRESS_LINES  # one name, from the run contract, on both sides


def test_fit_prints_one_line_per_validation(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(PROGRESS_VAR, "lines")
    args = ["--trainer.max_steps=8", "--trainer.val_check_interval=4", "--trainer.num_sanity_val_steps=2"]
    cli = cli_main(["fit", *TINY, *args, f"--trainer.logger.init_args.save_dir={tmp_path}"])
    assert isinstance(cli.trainer.progress_bar_callback, LineProgress)
    out = capsys.readouterr()
    assert "\r" not in out.out + out.err and "\x1b[" not in out.out + out.err
    lines = out.out.splitlines()
    steps = [line for line in lines if line.startswith("step ")]  # none for the sanity check
    assert [line.split()[1] for line in steps] == ["4/8", "8/8"]
    for line in steps:
        assert all(f" {word} " in line for word in ("train/loss", "val/loss", "val/ppl", "elapsed")), line
    assert any(line.startswith("done: step 8/8") for line in lines)

    # the choice is not part of the saved config: it re-runs the same way in a terminal and in a log
    saved = Path(cli.trainer.log_dir) / "config.yaml"
    config = yaml.safe_load(saved.read_text())
    assert config["trainer"]["enable_progress_bar"] in (None, True)
    assert "LineProgress" not in saved.read_text()
    cli_main(["validate", "--config", str(saved), "--trainer.logger=false", f"--trainer.default_root_dir={tmp_path}"])
    validated = [line for line in capsys.readouterr().out.splitlines() if line.startswith("validate ")]
    assert len(validated) == 1 and "val/loss " in validated[0]


def test_bar_kept_when_asked_and_none_when_disabled(monkeypatch, tmp_path):
    logger = f"--trainer.logger.init_args.save_dir={tmp_path}"
    monkeypatch.setenv(PROGRESS_VAR, "bar")
    bar = cli_main([*TINY, logger], run=False).trainer.progress_bar_callback
    assert isinstance(bar, ProgressBar) and not isinstance(bar, LineProgress)
    monkeypatch.setenv(PROGRESS_VAR, "lines")
    disabled = cli_main([*TINY, logger, "--trainer.enable_progress_bar=false"], run=False)
    assert disabled.trainer.progress_bar_callback is None
