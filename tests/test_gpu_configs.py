"""Every family's GPU config trains in `bf16-mixed` with its gradient clipping: the same config files
as the documented GPU command (`configs/<family>/base.yaml` + `gpu.yaml`), run on the CPU for two
steps and a validation with the sizes made tiny, so the precision, optimiser and clipping path of
the GPU run is exercised without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cli import cli_main
from experiments.sweep.validate import config_value, parse

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
SHARED_DATA = ROOT.parent / "shared" / "data"  # read-only offline copies, never copied into the project
FAMILIES = ["gpt", "bert", "translation", "vit"]

TINY = ["--model.arch.d_model", "32", "--model.arch.n_layers", "1", "--model.arch.n_heads", "2"]
TINY_TEXT = ["--data.seq_len", "32", "--data.eval_lengths", "[32]", "--data.val_tokens", "256"]
TINY_DATA = {
    "gpt": [*TINY_TEXT, "--data.batch_size", "4"],
    "bert": [*TINY_TEXT, "--data.batch_size", "4"],
    "translation": ["--data.max_len", "16", "--data.batch_size", "4"],
    "vit": ["--data.batch_size", "4"],
}
# the GPU configs' data is downloaded (Tiny Shakespeare, WikiText-2, CIFAR-10) and a test never downloads:
# the config's own dataset from ../shared/data when there is a copy, else the family's offline default
OFFLINE_DATA = {
    "gpt": ("tinyshakespeare", ["--data.corpus", "default"]),
    "bert": ("wikitext2", ["--data.corpus", "default"]),
    "translation": ("multi30k", ["--data.dataset", "scan"]),
    "vit": ("cifar10", ["--data.dataset", "digits"]),
}
TWO_STEPS = [
    "--trainer.accelerator",
    "cpu",
    "--trainer.precision",
    "bf16-mixed",
    "--trainer.max_steps",
    "2",
    "--trainer.val_check_interval",
    "2",
    "--trainer.limit_val_batches",
    "1",
    "--trainer.num_sanity_val_steps",
    "0",
    "--trainer.enable_progress_bar",
    "false",
    "--trainer.enable_model_summary",
    "false",
]


def gpu_args(family: str, save_dir: Path) -> list[str]:
    copy, offline = OFFLINE_DATA[family]
    data = ["--data.data_dir", str(SHARED_DATA / copy)] if (SHARED_DATA / copy).is_dir() else offline
    return [
        "fit",
        "-c",
        str(CONFIGS / family / "base.yaml"),
        "-c",
        str(CONFIGS / family / "gpu.yaml"),
        *TINY,
        *TINY_DATA[family],
        *data,
        # Inductor's CPU build alone takes 1-1.5 min on 2 cores; the slow test below keeps it
        "--model.compile",
        "false",
        *TWO_STEPS,
        "--trainer.logger.init_args.save_dir",
        str(save_dir),
    ]


def _trains_two_steps(cli) -> None:
    trainer = cli.trainer
    assert trainer.precision == "bf16-mixed" and trainer.gradient_clip_val == 1.0
    assert trainer.global_step == 2
    metrics = trainer.callback_metrics
    assert torch.isfinite(metrics["train/loss"]) and torch.isfinite(metrics["val/loss"])
    # Lightning clips only an optimiser that leaves unscaling to it: foreach AdamW, not the fused kernel
    defaults = trainer.optimizers[0].defaults
    assert defaults["fused"] is False and defaults["foreach"] is True


@pytest.mark.parametrize("family", FAMILIES)
def test_gpu_config_is_bf16_mixed_and_clips(family):
    """What the runs below rely on: each documented GPU command trains in bf16-mixed and clips (as resolved by
    the CLI: clipping is the suite's trainer default, which no GPU config may turn off)."""
    config = parse(["-c", str(CONFIGS / family / "base.yaml"), "-c", str(CONFIGS / family / "gpu.yaml")])
    assert config_value(config, "trainer.precision") == "bf16-mixed"
    assert config_value(config, "trainer.gradient_clip_val") == 1.0


@pytest.mark.parametrize("family", FAMILIES)
def test_gpu_config_trains_in_bf16_mixed(family, tmp_path):
    _trains_two_steps(cli_main(gpu_args(family, tmp_path)))


def test_activation_checkpointing_trains_in_bf16_mixed(tmp_path):
    cli = cli_main(gpu_args("gpt", tmp_path) + ["--model.arch.activation_checkpointing", "true"])
    assert cli.model.model.stack.activation_checkpointing
    _trains_two_steps(cli)


def test_a_fused_adamw_would_not_clip(tmp_path, monkeypatch):
    """The failure these tests guard against, reproduced: the fused kernel under bf16-mixed."""
    import lit_modules.optim

    monkeypatch.setattr(lit_modules.optim, "adamw_kernel", lambda fused, precision: {"fused": True})
    with pytest.raises(RuntimeError, match="does not allow for gradient clipping"):
        cli_main(gpu_args("gpt", tmp_path))


@pytest.mark.slow
def test_gpt_gpu_config_trains_compiled_in_bf16_mixed(tmp_path):
    args = gpu_args("gpt", tmp_path)
    i = args.index("--model.compile")
    _trains_two_steps(cli_main(args[:i] + args[i + 2 :]))
