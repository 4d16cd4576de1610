"""`cli.py export`: a trained run as the equivalent transformers / timm model, saved the library's way.

    python cli.py export --config RUN/config.yaml --ckpt_path RUN/checkpoints/X.ckpt --out DIR [--format suite]
                         [--weights averaged]

The run's task module and DataModule are rebuilt from its `config.yaml` (`lit_modules.rebuilt_run.build_run`);
the checkpoint's weights are loaded into it with `weights_only=True` (tensors and plain containers, never
code); `models.interop.to_reference` makes the reference model, and it is written with transformers'
`save_pretrained` or timm's `save_for_hf` (safetensors weights and timm's config.json), so it opens
with `<Class>.from_pretrained(DIR)` or `timm.create_model("local-dir:DIR", pretrained=True)`.
Not written: the tokenizer (the suite's vocabulary is its DataModule's). `--weights averaged` exports the
checkpoint's averaged weights (a run trained with `--averaging.kind ema|uniform`) instead of its trained ones.

A LoRA run is exported with its updates merged into the base weights (exact up to float rounding), so
either format is a plain model. `--format suite` writes the suite's own plain model instead
(`DIR/model.pt`: `{"state_dict", "arch"}`, `lit_modules.rebuilt_run.export_merged`), which loads with
`--model.init_from DIR/model.pt` into a run of the same architecture without PEFT. Adapters cannot merge
(a nonlinear bottleneck), so an adapter run exports in neither format.

A µP or CompleteP run (`model.arch.parametrization`) exports to a reference as the `sp` model computing the same
logits: its multipliers folded into the weights (`models.parametrization_fold`), a tied head untied by the readout
multiplier (which T5 cannot express: refused, saying so). `--format suite` keeps the parametrization as it is: the
suite computes it, and a run started from the file (`--model.init_from`, the same architecture) trains on under it.

The run's trainer settings (devices, precision, strategy) are not needed, so a GPU run exports on a
CPU-only machine; a compiled run's checkpoint loads as well.

Exit status: 0; 1 when the model has no equivalent reference (the message names every setting) or
an adapter run asks for a merged model;
2 for a missing file, a checkpoint that does not fit the config (or has no average to export), or a missing
reference library.
"""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path

import torch

from contract.errors import ConfigError
from lit_modules.rebuilt_run import build_run, export_merged, load_weights, reference_model, write_reference
from lit_modules.sharded_checkpoints import consolidated
from models.finetune import check_checkpoint_file

SUITE_MODEL_FILE = "model.pt"


def parse_args(argv: list[str]) -> argparse.Namespace:
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
    parser.add_argument(
        "--weights",
        choices=("raw", "averaged"),
        default="raw",
        help="raw: the trained weights; averaged: the checkpoint's average (a run with --averaging.kind ema|uniform)",
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not args.config.is_file():
        print(f"error: --config: {args.config} not found; give the run's config.yaml (RUN/config.yaml)", flush=True)
        return 2
    try:
        check_checkpoint_file(args.ckpt_path, "--ckpt_path")
    except ConfigError as error:
        print(f"error: {error}", flush=True)
        return 2
    try:  # tensors and plain containers only: a checkpoint runs no code here
        checkpoint = torch.load(
            consolidated(args.ckpt_path), map_location="cpu", weights_only=True
        )  # (a folder: sharded)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as error:
        print(f"error: {args.ckpt_path} is not a checkpoint torch.load reads with weights_only=True ({error})")
        return 2
    task, datamodule = build_run(args.config)
    task.init_from = None  # the checkpoint holds every weight; the run's starting point may be gone
    task.prepare_model()  # a PEFT run's own parameters (LoRA, adapters), which its checkpoint holds
    try:
        load_weights(task, checkpoint, averaged=args.weights == "averaged")
    except ConfigError as error:  # no average in the checkpoint
        print(f"error: --weights averaged: {error}", flush=True)
        return 2
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
    try:
        reference = reference_model(task.base_model)
    except ValueError as error:
        print(f"error: {error}", flush=True)
        return 1
    except ImportError as error:  # transformers and timm are test requirements, not the suite's
        print(f"error: {error}; exporting needs the reference's library: pip install -r requirements-test.txt")
        return 2
    parametrization = task.base_model.cfg.parametrization
    if parametrization != "sp":
        print(f"parametrization={parametrization!r}: its multipliers are folded into the weights (the same logits)")
    args.out.mkdir(parents=True, exist_ok=True)
    how = write_reference(reference, args.out, task, datamodule)
    print(f"wrote {type(reference).__module__.split('.')[0]} {type(reference).__name__} to {args.out}; load it with:")
    print(f"  {how}", flush=True)
    return 0
