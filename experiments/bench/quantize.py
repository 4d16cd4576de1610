"""Post-training dynamic int8 quantization (`--model.quantize int8`): CPU inference speed-up and the loss
change per family, fp32 against int8 Linear layers on the same batch.

The models are freshly initialised (no training in a benchmark), so the loss is that of random weights on
random targets: its change measures the quantization error's effect on the output, not a task's accuracy.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lit_modules.int8 import quantize_model
from models import GPT, BertMLM, EncoderDecoder, ViT

from .common import Context
from .tables import Section, Table
from .timing import interleaved, ratio_range


def _families(ctx: Context) -> dict[str, tuple[nn.Module, Callable[[nn.Module], Tensor], Tensor]]:
    """family -> (model, forward on a fixed batch, targets)."""
    s = ctx.settings
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, s.vocab_size, (s.batch_size, s.seq_len), generator=g)
    images = torch.randn(s.batch_size, 3, s.vit_image, s.vit_image, generator=g)
    targets = torch.randint(0, s.vocab_size, (s.batch_size, s.seq_len), generator=g)
    torch.manual_seed(0)
    arch = s.arch()
    vit = ViT(s.arch(pos_encoding="sinusoidal"), image_size=s.vit_image, patch_size=4, in_channels=3, num_classes=10)
    return {
        "GPT": (GPT(arch), lambda m: m(ids), targets),
        "BERT": (BertMLM(arch), lambda m: m(ids), targets),
        "translation": (EncoderDecoder(arch), lambda m: m(ids, ids), targets),
        "ViT": (vit, lambda m: m(images), targets[:, 0] % 10),
    }


def run(ctx: Context) -> Section:
    s = ctx.settings
    section = Section("quantize", "Dynamic int8 quantization: CPU inference speed-up and loss change")
    table = Table(
        [
            "family",
            "forward, fp32",
            "forward, int8",
            "speed-up fp32 ÷ int8 (paired range)",
            "loss fp32",
            "loss int8",
            "Δ loss",
        ],  # fmt: skip
        title=f"d_model {s.d_model}, {s.n_layers} layers, batch {s.batch_size}, seq {s.seq_len} (ViT: "
        f"{s.vit_image}px images); forward in inference mode, {torch.get_num_threads()} threads",
    )
    for family, (model, forward, targets) in _families(ctx).items():
        model.eval()
        with torch.inference_mode():
            fp32_loss = F.cross_entropy(forward(model).flatten(0, -2), targets.flatten()).item()
            quantized = quantize_model(copy.deepcopy(model), "int8")
            int8_loss = F.cross_entropy(forward(quantized).flatten(0, -2), targets.flatten()).item()
            times = interleaved({"fp32": lambda: forward(model), "int8": lambda: forward(quantized)}, s.reps, s.warmup)
        ratio = ratio_range(times["fp32"], times["int8"])
        section.data[family] = {"timing": times, "speedup": ratio, "loss_fp32": fp32_loss, "loss_int8": int8_loss}
        table.add(
            family, times["fp32"].fmt("ms"), times["int8"].fmt("ms"), f"{ratio[0]:.2f} ({ratio[1]:.2f}–{ratio[2]:.2f})",
            f"{fp32_loss:.4f}", f"{int8_loss:.4f}", f"{int8_loss - fp32_loss:+.4f}",
        )  # fmt: skip
    section.tables.append(table)
    section.notes.append(
        "torch.ao.quantization.quantize_dynamic on every nn.Linear (weights int8 per tensor, activations "
        "quantized per batch); attention's softmax, norms and embeddings stay fp32. Small models gain little: "
        "the int8 GEMMs' saving is offset by quantizing activations at every call."
    )
    return section
