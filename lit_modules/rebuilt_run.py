"""A trained run as a model to take elsewhere: its task module rebuilt from the run's config.yaml with a
checkpoint's weights, written as the equivalent transformers / timm model (`reference_model`,
`write_reference`) or as the suite's own plain model with LoRA merged (`export_merged`).
`tools/export.py` is its command line, `cli.py export`.

The config goes through the suite's own parser (`cli_main(run=False)`), which builds the task module and
its DataModule as the run did (vocabulary size, sequence length); the run's trainer settings (devices,
precision, strategy) are replaced, so a GPU run is rebuilt on a CPU-only machine.
"""

from __future__ import annotations

import copy
import inspect
import logging
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import yaml
from lightning.pytorch import LightningDataModule, Trainer
from lightning.pytorch.cli import LightningCLI
from torch import nn

from contract.errors import ConfigError
from lit_modules.averaging import averaged_weights, plain_key
from lit_modules.base import TaskModule
from lit_modules.suite_cli import cli_main
from models.interop import to_reference
from models.peft import has_lora, merge_lora

# the Trainer the parser builds alongside is never run: it must not need the run's devices (a GPU run
# exports on a CPU-only machine)
TRAINER_OVERRIDES = [
    "--trainer.logger=false",
    "--trainer.accelerator=cpu",
    "--trainer.devices=1",
    "--trainer.num_nodes=1",
    "--trainer.strategy=auto",
    "--trainer.precision=32-true",
]
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")  # data_info keys named as transformers names them
TIMM_PIXEL_MAX = 255  # timm's transforms scale pixels by 1/255 before normalising


def parse_run_config(path: Path) -> str:
    """The run's config.yaml as YAML for a parser without a subcommand: `fit` saves its own
    arguments (ckpt_path, weights_only) beside the config, which only the `fit` parser takes."""
    config = yaml.safe_load(path.read_text())
    fit_only = set(inspect.signature(Trainer.fit).parameters) - LightningCLI.subcommands()["fit"] - {"self"}
    return yaml.safe_dump({key: value for key, value in config.items() if key not in fit_only})


def build_run(config: Path) -> tuple[TaskModule, LightningDataModule]:
    """The task module and DataModule of a run's config.yaml, untrained (nothing is fitted or logged)."""
    quiet = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [log.level for log in quiet]
    for log in quiet:  # the Trainer built alongside reports its devices: noise for an export
        log.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            # LightningCLI warns when it is given `args` in a process that has command-line words of its
            # own: those are the export's (`cli.py export --config ...`), and only `args` is parsed
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended", category=UserWarning)
            cli = cli_main(["--config", parse_run_config(config), *TRAINER_OVERRIDES], run=False)
    finally:
        for log, level in zip(quiet, levels):
            log.setLevel(level)
    return cli.model, cli.datamodule


def load_weights(task: TaskModule, checkpoint: dict[str, Any], averaged: bool = False) -> None:
    """A Lightning checkpoint's weights into `task`, strictly (a compiled run's keys carry `_orig_mod.`): its trained
    weights, or with `averaged` its averaged ones (`lit_modules.averaging`; a ConfigError if it has none)."""
    state = averaged_weights(checkpoint) if averaged else checkpoint["state_dict"]
    task.load_state_dict({plain_key(key): value for key, value in state.items()})


def reference_model(model: nn.Module) -> nn.Module:
    """`models.interop.to_reference` of `model` with LoRA merged (a reference has no LoRA); `model` is left
    as it is. Raises ValueError naming every setting no reference has, ImportError without its library."""
    return to_reference(merge_lora(copy.deepcopy(model)) if has_lora(model) else model)


def set_token_ids(reference: Any, data_info: dict[str, Any]) -> None:
    """The data's special token ids into a transformers model's config and generation config (an
    encoder-decoder's decoder starts from BOS, as the suite's does)."""
    ids = {key: int(data_info[key]) for key in TOKEN_IDS if key in data_info}
    if reference.config.is_encoder_decoder and "bos_token_id" in ids:
        ids["decoder_start_token_id"] = ids["bos_token_id"]
    for config in filter(None, (reference.config, getattr(reference, "generation_config", None))):
        for key, value in ids.items():
            setattr(config, key, value)


def timm_data_config(datamodule: LightningDataModule) -> dict[str, Any] | None:
    """The image preprocessing of an image DataModule in timm's terms: the suite scales pixels by
    1/max_value before (x - mean) / std, timm by 1/255, so mean and std scale by max_value/255; and the
    suite evaluates whole images (timm's default crops 90%)."""
    spec = getattr(datamodule, "spec", None)
    if spec is None or not all(hasattr(spec, name) for name in ("mean", "std", "max_value")):
        return None
    ratio = spec.max_value / TIMM_PIXEL_MAX
    return {"mean": tuple(m * ratio for m in spec.mean), "std": tuple(s * ratio for s in spec.std), "crop_pct": 1.0}


def write_reference(reference: Any, out: Path, task: TaskModule, datamodule: LightningDataModule) -> str:
    """Writes `reference` to `out` with its library's own saver (transformers' `save_pretrained`, timm's
    `save_for_hf`: safetensors weights and config.json); returns how to load it back."""
    if hasattr(reference, "save_pretrained"):  # transformers
        set_token_ids(reference, task.data_info)
        reference.save_pretrained(out)
        name = type(reference).__name__
        return f'from transformers import {name}; {name}.from_pretrained("{out}")'
    from timm.models import save_for_hf

    save_for_hf(reference, out, safe_serialization=True, data_config=timm_data_config(datamodule))
    return f'import timm; timm.create_model("local-dir:{out}", pretrained=True)'


def export_merged(model: nn.Module, path: str | Path) -> Path:
    """Writes `model` with LoRA merged as a plain model's weights (`{"state_dict", "arch"}`), loadable with
    `load_state_dict` into a model built from `arch`, or as `--model.init_from`. Adapters cannot merge (a
    nonlinear bottleneck): exporting them is an error. The model passed in is left as it is."""
    if any(hasattr(m, "adapter") for m in model.modules()):
        raise ConfigError("model.peft.method: adapter weights cannot merge into the base model; export LoRA runs")
    plain = merge_lora(copy.deepcopy(model))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": plain.state_dict(), "arch": asdict(plain.cfg)}, path)
    return path
