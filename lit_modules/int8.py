"""Dynamic int8 quantization for evaluating a trained model (`--model.quantize int8`): smaller Linear
weights and faster CPU inference, at a measured cost in loss (`cli.py bench --sections quantize`)."""

from __future__ import annotations

import warnings
from typing import Literal, get_args

import torch
from torch import nn

from contract.errors import ConfigError
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


class Int8Evaluation:
    """Mixin of `TaskModule`: `quantize: int8` evaluates with the quantized model and refuses to train it."""

    def setup(self, stage: str) -> None:
        if stage == "fit" and self.quantize != "none":
            raise ConfigError(
                f"model.quantize: {self.quantize} is post-training quantization: use it with cli.py validate, "
                "test or predict (with --ckpt_path), not fit"
            )

    def _quantize_for_evaluation(self) -> None:
        if self.quantize != "none" and not self.trainer.state.fn == "fit":
            self.model = quantize_model(self.base_model, self.quantize, self.device)

    def on_validation_start(self) -> None:
        self._quantize_for_evaluation()

    def on_test_start(self) -> None:
        self._quantize_for_evaluation()

    def on_predict_start(self) -> None:
        self._quantize_for_evaluation()
