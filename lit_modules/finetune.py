"""Inference-time transforms of a trained model: LoRA merged into its weights, dynamic int8 quantization."""

from __future__ import annotations

import copy
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Literal, get_args

import torch
from torch import nn

from models.config import ConfigError
from models.peft import has_lora, merge_lora

Quantize = Literal["none", "int8"]
QUANT_DTYPES: dict[Quantize, torch.dtype | None] = {"none": None, "int8": torch.qint8}
assert set(QUANT_DTYPES) == set(get_args(Quantize))


def quantize_model(model: nn.Module, quantize: Quantize, device: torch.device | str = "cpu") -> nn.Module:
    """`model` with its Linear layers dynamically quantized (weights int8, activations quantized per batch
    at run time; PyTorch's post-training dynamic quantization, CPU kernels only). LoRA is merged first, so
    the quantized Linear holds the fine-tuned weight. Returns `model` itself for `none`."""
    dtype = QUANT_DTYPES[quantize]
    if dtype is None:
        return model
    if torch.device(device).type != "cpu":
        raise ConfigError(
            f"model.quantize: {quantize} runs on CPU only (dynamic quantization has no {torch.device(device).type} "
            "kernels): add --trainer.accelerator cpu"
        )
    if has_lora(model):
        merge_lora(model)
    with warnings.catch_warnings():
        # torch.ao.quantization is deprecated in favour of torchao; its dynamic Linear is still torch's own
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*torch.ao.quantization.*|.*quantized tensor creation.*")
        return torch.ao.quantization.quantize_dynamic(model.eval(), {nn.Linear}, dtype=dtype)


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
