"""Starting a model from weights, and which of its parameters train.

Weights come from a suite checkpoint (a Lightning `.ckpt` of any family, or a `.pt` state dict such as a
merged export) or from a reference model's directory (transformers `save_pretrained` or timm), converted
by `models.interop.from_reference`. Loading is strict: every key of the model must be in the file with
its shape, except the modules a run declares replaced (`init_replace`, e.g. a head for a new vocabulary
or class count), which keep their fresh initialisation and always train.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Literal, get_args

import torch
from torch import Tensor, nn

from .config import ConfigError
from .peft import PeftConfig, apply_peft

FreezePolicy = Literal["auto", "none", "all", "all_but_head", "embeddings"]
# prefixes a LightningModule (`model.`) and torch.compile (`_orig_mod.`) put before the model's own keys
WRAPPER_PREFIXES = ("model.", "_orig_mod.")


def _params(model: nn.Module, modules: tuple[str, ...]) -> set[int]:
    return {id(p) for name in modules for p in model.get_submodule(name).parameters()}


def _head(model: nn.Module) -> set[int]:
    return _params(model, model.head_modules)


# base parameters each policy holds fixed (`auto` is resolved by `set_trainable`)
FROZEN = {
    "none": lambda model: set(),
    "all": lambda model: {id(p) for p in model.parameters()},
    "all_but_head": lambda model: {id(p) for p in model.parameters()} - _head(model),
    # lookup tables: token embeddings, learned positions, relative-bias tables
    "embeddings": lambda model: model._embedding_parameters(),
}
assert set(FROZEN) | {"auto"} == set(get_args(FreezePolicy))


def _strip(key: str) -> str | None:
    """The model's key of a checkpoint key, or None for a key outside the model (metrics, buffers)."""
    if not key.startswith(WRAPPER_PREFIXES[0]):
        return None
    key = key.removeprefix(WRAPPER_PREFIXES[0])
    return key.removeprefix(WRAPPER_PREFIXES[1])


def _reference_state(folder: Path) -> dict[str, Tensor]:
    """A transformers or timm model saved in `folder`, as a suite state dict (offline: local files only)."""
    from .interop import from_reference

    config = json.loads((folder / "config.json").read_text())
    if "architecture" in config:  # timm's `save_pretrained` layout
        import timm

        reference = timm.create_model(f"local-dir:{folder}", pretrained=True)
    else:
        import transformers

        names = config.get("architectures") or []
        if not names or not hasattr(transformers, names[0]):
            raise ConfigError(f"model.init_from: {folder}/config.json names no transformers class ('architectures')")
        reference = getattr(transformers, names[0]).from_pretrained(folder, local_files_only=True)
    return from_reference(reference).state_dict()


CHECKPOINT_EXPECTED = "a checkpoint: a run's RUN/checkpoints/*.ckpt, or a .pt that torch.save wrote"


DISTRIBUTED_METADATA = ".metadata"  # torch.distributed.checkpoint's index of a checkpoint folder, written last


def check_checkpoint_file(path: str | Path, key: str) -> Path:
    """A checkpoint file a command will read, checked before anything is built: it exists, is a file, can be
    read, and is a zip archive, the format torch.save writes (a truncated or foreign file is not one); or a
    distributed checkpoint's folder (a sharded run's, `lit_modules.sharded_checkpoints`).

    Raises:
        ConfigError: one line, `<key>: <file> <what is wrong>; give <what is expected>`.
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{key}: {path} does not exist; give {CHECKPOINT_EXPECTED}")
    if path.is_dir() and (path / DISTRIBUTED_METADATA).is_file():
        return path  # a distributed checkpoint (torch.distributed.checkpoint: every rank's shards)
    if path.is_dir():
        raise ConfigError(f"{key}: {path} is a folder; give {CHECKPOINT_EXPECTED}")
    try:
        is_zip = zipfile.is_zipfile(path)
    except OSError as err:
        raise ConfigError(f"{key}: {path} cannot be read ({err.strerror}); check its permissions") from None
    if not is_zip:
        raise ConfigError(
            f"{key}: {path} is not a checkpoint (torch.save writes a zip archive; this file is not one: truncated, "
            f"or another format); give {CHECKPOINT_EXPECTED}"
        )
    return path


def read_weights(path: str | Path) -> dict[str, Tensor]:
    """The model weights in `path`: a Lightning checkpoint, a state dict (`{"state_dict": ...}` or bare),
    or a reference model's folder. Files load with `weights_only=True` (no code runs from them)."""
    path = Path(path)
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ConfigError(f"model.init_from: {path} is a folder without config.json (a reference model's)")
        return _reference_state(path)
    if not path.exists():
        raise ConfigError(f"model.init_from: {path} does not exist; give a .ckpt, a .pt state dict or a model folder")
    data = torch.load(check_checkpoint_file(path, "model.init_from"), map_location="cpu", weights_only=True)
    state = data.get("state_dict", data) if isinstance(data, dict) else None
    if not isinstance(state, dict):
        raise ConfigError(f"model.init_from: {path} holds no state dict")
    if "pytorch-lightning_version" in data:  # a LightningModule's keys: the model's under `model.`
        state = {key: value for k, value in state.items() if (key := _strip(k)) is not None}
    return state


def load_weights(model: nn.Module, state: dict[str, Tensor], replace: tuple[str, ...] = (), source: str = "") -> None:
    """Copies `state` into `model`, strictly: a key missing, unexpected or of another shape is an error
    listing every such key, unless it belongs to a module of `replace`, which keeps its initialisation.
    A parameter shared with a replaced module (a tied embedding) counts as replaced too."""
    for name in replace:
        try:
            model.get_submodule(name)
        except AttributeError:
            raise ConfigError(f"model.init_replace: {name!r} is no module of {type(model).__name__}") from None
    adapt = getattr(model, "adapt_state_dict", None)  # ViT: position tables of another grid, resampled
    if adapt is not None:
        state = adapt(state)
    replaced_ids = _params(model, replace)
    own = model.state_dict(keep_vars=True)
    replaced = {k for k, p in own.items() if id(p) in replaced_ids or k.startswith(tuple(f"{r}." for r in replace))}
    problems = [f"{k} (missing)" for k in own.keys() - state.keys() - replaced]
    problems += [f"{k} (unexpected)" for k in state.keys() - own.keys()]
    problems += [
        f"{k} (shape {tuple(state[k].shape)} in the file, {tuple(own[k].shape)} here)"
        for k in own.keys() & state.keys()
        if k not in replaced and state[k].shape != own[k].shape
    ]
    if problems:
        heads = ", ".join(getattr(model, "head_modules", ()))
        raise ConfigError(
            f"model.init_from: {source or 'the weights'} do not fit {type(model).__name__}: "
            f"{'; '.join(sorted(problems))}. Use the architecture they were trained with; a head deliberately "
            f"replaced (a new vocabulary or class count) is declared: --model.init_replace [{heads}] "
            "(with tied embeddings, the embedding is the head)"
        )
    with torch.no_grad():
        model.load_state_dict({k: v for k, v in state.items() if k not in replaced}, strict=False)


def set_trainable(
    model: nn.Module, peft: PeftConfig, freeze: FreezePolicy = "auto", replace: tuple[str, ...] = ()
) -> None:
    """Adds the PEFT method's parameters and sets `requires_grad` on every parameter: the base parameters
    `freeze` leaves free, the method's own, and the replaced modules (fresh weights always train).
    `auto` is `none` for full fine-tuning and `all` with a PEFT method."""
    policy = freeze if freeze != "auto" else ("none" if peft.method == "none" else "all")
    frozen = FROZEN[policy](model)  # the base parameters, before the method adds its own
    trains = apply_peft(model, peft) | _params(model, replace)
    if peft.method != "none" and policy == "none":
        raise ConfigError(
            f"model.freeze: none trains every base weight, so peft.method {peft.method} would not be "
            "parameter-efficient: leave model.freeze unset (auto), or set all or all_but_head"
        )
    for p in model.parameters():
        p.requires_grad_(id(p) in trains or id(p) not in frozen)
