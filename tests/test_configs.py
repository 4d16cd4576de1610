"""Every YAML in configs/ parses; every tiny config trains on CPU offline; a saved config.yaml
re-runs to the same metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cli import cli_main

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
FAMILIES = ["gpt", "bert", "translation", "vit"]
# a config that is a diff of another overlay, not of its family's base alone (its usage line gives the stack)
OVERLAYS = {"vit/cifar10_recipe.yaml": ["vit/recipe.yaml"], "gpt/gpt_1b3.yaml": ["gpt/gpu.yaml"]}


def config_stacks() -> list[list[Path]]:
    """Each config file with what it overlays: a family's base (and OVERLAYS), or the GPT base for ablations."""
    stacks = []
    for family in FAMILIES:
        base = CONFIGS / family / "base.yaml"
        stacks.append([base])
        for f in sorted((CONFIGS / family).glob("*.yaml")):
            if f.name != "base.yaml":
                under = [CONFIGS / o for o in OVERLAYS.get(f"{family}/{f.name}", [])]
                stacks.append([base, *under, f])
    stacks += [[CONFIGS / "gpt/base.yaml", f] for f in sorted((CONFIGS / "ablations").glob("*.yaml"))]
    return stacks


def test_every_yaml_is_covered():
    covered = {str(f) for stack in config_stacks() for f in stack}
    assert covered == {str(f) for f in CONFIGS.rglob("*.yaml")}


@pytest.mark.parametrize("stack", config_stacks(), ids=lambda s: "+".join(f"{p.parent.name}/{p.stem}" for p in s))
def test_config_parses(stack, capsys):
    args = ["fit"] + [a for f in stack for a in ("-c", str(f))] + ["--print_config"]
    with pytest.raises(SystemExit) as exit_info:
        cli_main(args)
    assert exit_info.value.code in (None, 0)
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["class_path"].startswith("lit_modules.")
    assert printed["data"]["class_path"].startswith("datamodules.")


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_config_fast_dev_run(family, tmp_path):
    cli = cli_main(
        [
            "fit",
            "-c",
            str(CONFIGS / family / "base.yaml"),
            "-c",
            str(CONFIGS / family / "tiny.yaml"),
            "--trainer.fast_dev_run",
            "2",
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.default_root_dir",
            str(tmp_path),
        ]
    )
    assert cli.trainer.global_step == 2
    assert all(v.isfinite() for k, v in cli.trainer.callback_metrics.items() if k.startswith("train/"))


def _run(args: list[str], save_dir: Path) -> dict[str, float]:
    cli = cli_main(
        args
        + [
            "--trainer.max_steps",
            "4",
            "--trainer.val_check_interval",
            "4",
            "--trainer.limit_val_batches",
            "2",
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.logger.init_args.save_dir",
            str(save_dir),
        ]
    )
    return {k: float(v) for k, v in cli.trainer.callback_metrics.items()}, Path(cli.trainer.log_dir)


def test_saved_config_reruns_to_same_metrics(tmp_path):
    tiny = ["-c", str(CONFIGS / "gpt/base.yaml"), "-c", str(CONFIGS / "gpt/tiny.yaml")]
    overrides = ["--model.arch.pos_encoding", "rope", "--model.arch.d_model", "32", "--data.val_tokens", "2048"]
    first, log_dir = _run(["fit", *tiny, *overrides, "--model.sample_tokens", "0"], tmp_path / "a")
    saved = log_dir / "config.yaml"
    assert yaml.safe_load(saved.read_text())["model"]["init_args"]["arch"]["pos_encoding"] == "rope"
    second, _ = _run(["fit", "--config", str(saved)], tmp_path / "b")
    assert first["val/loss"] == pytest.approx(second["val/loss"], abs=1e-6)
    assert first["train/loss"] == pytest.approx(second["train/loss"], abs=1e-6)
