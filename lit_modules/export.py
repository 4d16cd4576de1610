"""`cli.py export`: a trained run as the equivalent transformers / timm model, saved the library's way.

    python cli.py export --config RUN/config.yaml --ckpt_path RUN/checkpoints/X.ckpt --out DIR [--format suite]

The run's `config.yaml` goes through the suite's own parser (`cli_main(run=False)`), which builds the
task module and its DataModule as the run did (vocabulary size, sequence length); the checkpoint's
weights are loaded into it with `weights_only=True` (tensors and plain containers, never code);
`models.interop.to_reference` makes the reference model, and it is written with transformers'
`save_pretrained` or timm's `save_for_hf` (safetensors weights and timm's config.json), so it opens
with `<Class>.from_pretrained(DIR)` or `timm.create_model("local-dir:DIR", pretrained=True)`.
Not written: the tokenizer (the suite's vocabulary is its DataModule's).

A LoRA run is exported with its updates merged into the base weights (exact up to float rounding), so
either format is a plain model. `--format suite` writes the suite's own plain model instead
(`DIR/model.pt`: `{"state_dict", "arch"}`, `export_merged`), which loads with
`--model.init_from DIR/model.pt` into a run of the same architecture without PEFT. Adapters cannot merge
(a nonlinear bottleneck), so an adapter run exports in neither format.

The run's trainer settings (devices, precision, strategy) are not needed, so a GPU run exports on a
CPU-only machine; a compiled run's checkpoint loads as well.

Exit status: 0; 1 when the model has no equivalent reference (the message names every setting) or
an adapter run asks for a merged model;
2 for a missing file, a checkpoint that does not fit the config, or a missing reference library.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import logging
import pickle
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import yaml
from lightning.pytorch import LightningDataModule, Trainer
from lightning.pytorch.cli import LightningCLI
from torch import nn

from lit_modules.base import TaskModule
from lit_modules.cli import cli_main
from models.config import ConfigError
from models.interop import to_reference
from models.peft import has_lora, merge_lora

SUITE_MODEL_FILE = "model.pt"

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
        # the parser reads `args` only: this process's own arguments are the export's
        with mock.patch.object(sys, "argv", sys.argv[:1]):
            cli = cli_main(["--config", parse_run_config(config), *TRAINER_OVERRIDES], run=False)
    finally:
        for log, level in zip(quiet, levels):
            log.setLevel(level)
    return cli.model, cli.datamodule


def load_weights(task: TaskModule, checkpoint: dict[str, Any]) -> None:
    """A Lightning checkpoint's weights into `task`, strictly (a compiled run's keys carry `_orig_mod.`)."""
    state = checkpoint["state_dict"]
    task.load_state_dict({key.replace("._orig_mod.", ".", 1): value for key, value in state.items()})


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


def write(reference: Any, out: Path, task: TaskModule, datamodule: LightningDataModule) -> str:
    """Writes `reference` to `out` with its library's own saver; returns how to load it back."""
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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="cli.py export", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True, help="the run's config.yaml")
    parser.add_argument("--ckpt_path", type=Path, required=True, help="a checkpoint of that run")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write the model to")
    parser.add_argument(
        "--format",
        choices=("reference", "suite"),
        default="reference",
        help="reference: the transformers/timm equivalent; suite: the suite's plain model (LoRA merged), model.pt",
    )
    args = parser.parse_args(argv)
    for path in (args.config, args.ckpt_path):
        if not path.is_file():
            print(f"error: {path} not found", flush=True)
            return 2
    try:  # tensors and plain containers only: a checkpoint runs no code here
        checkpoint = torch.load(args.ckpt_path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as error:
        print(f"error: {args.ckpt_path} is not a checkpoint torch.load reads with weights_only=True ({error})")
        return 2
    task, datamodule = build_run(args.config)
    task.init_from = None  # the checkpoint holds every weight; the run's starting point may be gone
    task.prepare_model()  # a PEFT run's own parameters (LoRA, adapters), which its checkpoint holds
    try:
        load_weights(task, checkpoint)
    except (RuntimeError, KeyError, TypeError) as error:
        print(
            f"error: {args.ckpt_path} does not fit the model of {args.config} ({error}); pass a checkpoint "
            f"written by the run of that config",
            flush=True,
        )
        return 2
    if args.format == "suite":
        try:
            path = export_merged(task.base_model, args.out / SUITE_MODEL_FILE)
        except ConfigError as error:
            print(f"error: {error}", flush=True)
            return 1
        print(f"wrote the suite's plain {type(task.base_model).__name__} to {path}; load it with:")
        hint = f"python cli.py fit --config {args.config} --model.init_from {path} --model.peft.method none"
        print(f"  {hint}", flush=True)
        return 0
    model = task.base_model
    if has_lora(model):
        model = merge_lora(copy.deepcopy(model))
    try:
        reference = to_reference(model)
    except ValueError as error:
        print(f"error: {error}", flush=True)
        return 1
    except ImportError as error:  # transformers and timm are test requirements, not the suite's
        print(f"error: {error}; exporting needs the reference's library: pip install -r requirements-test.txt")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    how = write(reference, args.out, task, datamodule)
    print(f"wrote {type(reference).__module__.split('.')[0]} {type(reference).__name__} to {args.out}; load it with:")
    print(f"  {how}", flush=True)
    return 0
