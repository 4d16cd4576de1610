"""The coordinate check's measurement: how the size of every layer's activations moves with width (or depth)
in the first steps of training, under a parametrization (Yang et al. 2022, Tensor Programs V, §D and Fig. 5; the
`mup` package's `get_coord_data`).

Each (family, parametrization, width, depth, seed) builds the suite's own model, trains it for `steps` Adam
steps at one fixed learning rate with the suite's optimizer (`lit_modules.optim.build_optimizer`, so µP's
per-parameter learning rates, ε and weight decay apply; no warm-up, no schedule, no weight decay) on one fixed
batch, and records at every step t = 0 (init) … `steps` (after t updates), for every quantity:

- `rms`: the root mean square sqrt(mean(x²)) of its coordinates;
- `delta`: the RMS of its change since init, x_t − x_0 (what µP keeps Θ(1): the maximal update).

Quantities: each stack's input embeddings (`embed`, `encoder.embed`, `decoder.embed`), each block's output (the
residual stream, `block0`), each sublayer's output before the residual add (`block0.attn`, `.cross`, `.ffn`), each
attention module's logits q·k·scale over every query-key pair, before any mask (`block0.attn.logits`), and the
output logits (`logits`). The batch is synthetic (random token ids, Gaussian images, random labels): the check
measures how activations scale with width, not what the model learns. Seeds (init and batch) are averaged as the
`mup` package does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models import GPT, ArchConfig, BertMLM, EncoderDecoder, ViT
from models.attention import Attention
from models.block import Block, TransformerStack
from models.ffn import FeedForward
from models.probes import short_name

FAMILIES = ("gpt", "bert", "translation", "vit")


@dataclass(frozen=True)
class Shape:
    """What stays fixed while width or depth moves: the data's shape and the heads (so d_head grows with width,
    as in the `mup` package's Transformer example; µP's 1/d_head attention scale is what keeps the logits Θ(1))."""

    vocab_size: int = 256
    seq_len: int = 32
    batch_size: int = 8
    n_heads: int = 4
    image_size: int = 16
    patch_size: int = 4
    num_classes: int = 10


def arch(parametrization: str, width: int, depth: int, shape: Shape, base_width: int, base_depth: int) -> ArchConfig:
    """The model's config: the suite's defaults, with µP's base width and CompleteP's base depth where they apply."""
    return ArchConfig(
        vocab_size=shape.vocab_size,
        d_model=width,
        n_layers=depth,
        n_heads=shape.n_heads,
        max_seq_len=shape.seq_len,
        parametrization=parametrization,
        base_width=base_width if parametrization != "sp" else None,
        base_depth=base_depth if parametrization == "completep" else None,
    )


def build(family: str, cfg: ArchConfig, shape: Shape, seed: int) -> tuple[nn.Module, tuple[Tensor, ...], Tensor]:
    """(model, its inputs, the targets of its cross entropy) of `family`; the model's init is drawn from `seed`,
    the batch from `seed` too, the same batch at every width and depth."""
    torch.manual_seed(seed)
    if family == "vit":
        model = ViT(cfg, image_size=shape.image_size, patch_size=shape.patch_size, num_classes=shape.num_classes)
    else:
        model = {"gpt": GPT, "bert": BertMLM, "translation": EncoderDecoder}[family](cfg)
    g = torch.Generator().manual_seed(10_000 + seed)
    B, T, V = shape.batch_size, shape.seq_len, shape.vocab_size

    def ids(length: int) -> Tensor:
        return torch.randint(0, V, (B, length), generator=g)

    if family == "gpt":
        tokens = ids(T + 1)
        return model, (tokens[:, :-1],), tokens[:, 1:]
    if family == "bert":
        return model, (ids(T),), ids(T)
    if family == "translation":
        target = ids(T + 1)
        return model, (ids(T), target[:, :-1]), target[:, 1:]
    images = torch.randn(B, 3, shape.image_size, shape.image_size, generator=g)
    return model, (images,), torch.randint(0, shape.num_classes, (B,), generator=g)


class Recorder:
    """While active, holds what one forward passes through the model's layers: name -> detached fp32 tensor."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.values: dict[str, Tensor] = {}
        self._hooks: list = []

    def __enter__(self) -> Recorder:
        for name, module in self.model.named_modules():
            name = short_name(name)
            if isinstance(module, TransformerStack):
                embed = "embed" if name in ("", "stack") else f"{name}.embed"  # a model's one stack is `stack`
                self._hooks.append(module.register_forward_pre_hook(self._input(embed)))
            elif isinstance(module, (Block, Attention, FeedForward)):
                self._hooks.append(module.register_forward_hook(self._output(name)))
            if isinstance(module, Attention):
                module.probe = self._attention(f"{name}.logits")
        self._hooks.append(self.model.register_forward_hook(self._output("logits")))
        return self

    def __exit__(self, *exc) -> None:
        for module in self.model.modules():
            if isinstance(module, Attention):
                module.probe = None
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()

    def _input(self, name: str):
        def hook(module, args) -> None:
            self.values[name] = args[0].detach().float()

        return hook

    def _output(self, name: str):
        def hook(module, args, output) -> None:
            self.values[name] = output.detach().float()

        return hook

    def _attention(self, name: str):
        @torch.no_grad()
        def probe(module: Attention, q: Tensor, k: Tensor, mask, is_causal: bool) -> None:
            scale = module.scale if module.scale is not None else q.shape[-1] ** -0.5
            self.values[name] = (q.float() @ k.float().transpose(-2, -1)) * scale

        return probe


def rms(x: Tensor) -> float:
    return x.square().mean().sqrt().item()


def measure(
    family: str, cfg: ArchConfig, shape: Shape, seed: int, steps: int, lr: float
) -> dict[str, dict[str, list[float]]]:
    """One model's coordinates: quantity -> {"rms": [step 0 … steps], "delta": [...]} (see the module docstring)."""
    from lit_modules.optim import OptimConfig, build_optimizer  # imports Lightning: not at module level

    model, inputs, targets = build(family, cfg, shape, seed)
    model.train()
    optimizer, _ = build_optimizer(model, OptimConfig(lr=lr, weight_decay=0.0, warmup_steps=0), max(steps, 1))
    record: dict[str, dict[str, list[float]]] = {}
    first: dict[str, Tensor] = {}
    with Recorder(model) as recorder:
        for step in range(steps + 1):
            recorder.values.clear()
            if step < steps:  # the training forward is the step's record: parameters after `step` updates
                output = model(*inputs)
                F.cross_entropy(output.flatten(0, -2), targets.flatten()).backward()
            else:
                with torch.no_grad():
                    model(*inputs)
            first = first or dict(recorder.values)
            for name, x in recorder.values.items():
                entry = record.setdefault(name, {"rms": [], "delta": []})
                entry["rms"].append(rms(x))
                entry["delta"].append(rms(x - first[name]))
            if step < steps:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    return record


def depth_alias(name: str, depth: int) -> str | None:
    """A quantity's name comparable across depths: block 0 is `block[first]`, the last `block[last]`, the others
    None (left out of the depth check); names outside the blocks are kept."""
    match = re.search(r"block(\d+)", name)
    if match is None:
        return name
    index = int(match.group(1))
    position = "first" if index == 0 else "last" if index == depth - 1 else None
    return None if position is None else name.replace(match.group(0), f"block[{position}]", 1)


def coord_data(
    family: str,
    parametrization: str,
    widths: Sequence[int],
    depths: Sequence[int],
    *,
    seeds: int,
    steps: int,
    lr: float,
    shape: Shape = Shape(),
    base_width: int | None = None,
    base_depth: int | None = None,
) -> dict:
    """The coordinates of `family` under `parametrization` over every (width, depth), averaged over `seeds`.

    One of `widths` and `depths` holds several sizes, the other one (the axis is the one that moves). `base_width`
    and `base_depth` default to the smallest width and depth.

    Returns:
        {"family", "parametrization", "axis": "width" | "depth", "sizes", "steps", "lr", "seeds",
        "quantities": {name: {"rms": [[step 0 … steps] per size], "delta": [...]}}}; over depth the names are
        `depth_alias`'s, and the quantities are those every size has.
    """
    axis = "depth" if len(depths) > 1 else "width"
    if len(widths) > 1 and len(depths) > 1:
        raise ValueError("coord_data moves one axis: pass a single width or a single depth")
    sizes = list(depths if axis == "depth" else widths)
    base_width, base_depth = base_width or min(widths), base_depth or min(depths)
    per_size = []
    for width in widths:
        for depth in depths:
            cfg = arch(parametrization, width, depth, shape, base_width, base_depth)
            runs = [measure(family, cfg, shape, seed, steps, lr) for seed in range(seeds)]
            mean = {
                name: {kind: np.mean([run[name][kind] for run in runs], axis=0).tolist() for kind in ("rms", "delta")}
                for name in runs[0]
            }
            if axis == "depth":
                mean = {depth_alias(name, depth): v for name, v in mean.items() if depth_alias(name, depth)}
            per_size.append(mean)
    names = [name for name in per_size[0] if all(name in size for size in per_size)]
    quantities = {name: {kind: [size[name][kind] for size in per_size] for kind in ("rms", "delta")} for name in names}
    return {
        "family": family,
        "parametrization": parametrization,
        "axis": axis,
        "sizes": sizes,
        "steps": steps,
        "lr": lr,
        "seeds": seeds,
        "base_width": base_width,
        "base_depth": base_depth,
        "quantities": quantities,
    }


def slope(sizes: Sequence[float], values: Sequence[float]) -> float:
    """The least-squares slope of log(value) against log(size): the exponent a in value ∝ size^a."""
    if any(not (v > 0 and math.isfinite(v)) for v in values):
        return math.nan
    return float(np.polyfit(np.log(sizes), np.log(values), 1)[0])


def slopes(data: dict, step: int | None = None, kind: str = "rms") -> dict[str, float]:
    """quantity -> `slope` of its `kind` ("rms" or "delta") over the sizes at `step` (default: the last)."""
    step = data["steps"] if step is None else step
    return {
        name: slope(data["sizes"], [per_step[step] for per_step in q[kind]]) for name, q in data["quantities"].items()
    }


def is_attention_logits(name: str) -> bool:
    return name.endswith(".logits")  # `block0.attn.logits`; the output logits are `logits`


# what the depth check covers: the embeddings, the last block's output (the residual stream the readout reads),
# every attention logit and the output logits. The first block's output and the sublayers are left out: under
# CompleteP the first block's change is Θ(1/depth) by design (each of the L branches adds Θ(1/L); only their sum,
# the last block's output, is Θ(1)).
DEPTH_CHECKED = re.compile(r"(^|\.)(embed|block\[last\]|logits)$")


def not_flat(data: dict, tolerance: float, step: int | None = None, kind: str = "rms") -> dict[str, float]:
    """The quantities that fail the coordinate check at `step` (default: the last), with their slopes: empty when
    it passes. Over width every quantity is checked; over depth those `DEPTH_CHECKED` names.

    A quantity fails when |slope| > `tolerance` (or the slope is not finite), except attention logits, which fail
    only by growing (slope > `tolerance`): without the zero-initialised query that Tensor Programs V recommends,
    q·k/d_head starts at O(1/√d_head) under µP and its Θ(1) update outweighs that only at widths far
    beyond a CPU's (measured: slope −0.2 to −0.5 after 5 steps at widths 64–512).
    """
    checked = slopes(data, step, kind)
    if data["axis"] == "depth":
        checked = {name: s for name, s in checked.items() if DEPTH_CHECKED.search(name)}
    return {
        name: s
        for name, s in checked.items()
        if not (s <= tolerance if is_attention_logits(name) else abs(s) <= tolerance)
    }
