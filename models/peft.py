"""Parameter-efficient fine-tuning of the suite's models: LoRA, bottleneck adapters, BitFit.

Targets are named by the shared `Block`'s parts, so one spelling serves every family:
`q`, `k`, `v`, `out` (self- and cross-attention) and `ffn_in`, `ffn_out` (`FeedForward.up`, `.down`).

- LoRA (Hu et al. 2021) goes through the `peft` library, injected into the suite's own modules by name
  (`inject_adapter_in_model`: no wrapper model, so checkpoint keys stay the suite's plus `lora_*`).
- Adapters (Houlsby et al. 2019; Pfeiffer et al. 2020 as `placement: pfeiffer`) are written here: `peft`
  has no bottleneck adapter it can attach to custom modules.
- BitFit (Ben Zaken et al. 2021) trains the existing biases; it adds nothing.

Which parameters train is decided by `models.finetune.set_trainable`; this module only adds parameters
and says which are its own (`apply_peft`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import Attention
from .config import ConfigError
from .ffn import FeedForward

PeftMethod = Literal["none", "lora", "adapter", "bitfit"]
PeftTarget = Literal["q", "k", "v", "out", "ffn_in", "ffn_out"]
AdapterPlacement = Literal["houlsby", "pfeiffer"]
ADAPTER_NAME = "default"  # peft's name of the one LoRA adapter


@dataclass(frozen=True)
class PeftConfig:
    """Args:
    method: `none` (full fine-tuning, or whatever `freeze` leaves), `lora`, `adapter` or `bitfit`.
    rank: LoRA's rank r; an adapter's bottleneck width.
    alpha: LoRA's scale numerator (the update is alpha/r · B·A).
    dropout: dropout on LoRA's input / inside an adapter.
    targets: LoRA's targets, the Block's parts: `q`, `k`, `v`, `out`, `ffn_in`, `ffn_out`.
    placement: adapters after every attention and FFN sublayer (`houlsby`) or after the FFN only (`pfeiffer`).
    """

    method: PeftMethod = "none"
    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[PeftTarget, ...] = ("q", "v")
    placement: AdapterPlacement = "houlsby"

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", tuple(self.targets))  # a list from Python or YAML
        for name, kind in (("method", PeftMethod), ("placement", AdapterPlacement)):
            if getattr(self, name) not in get_args(kind):
                raise ConfigError(
                    f"model.peft.{name}: {getattr(self, name)!r} is not one of {', '.join(get_args(kind))}"
                )
        bad = [t for t in self.targets if t not in get_args(PeftTarget)]
        if bad or not self.targets or len(set(self.targets)) != len(self.targets):
            raise ConfigError(
                f"model.peft.targets: {list(self.targets)} must be distinct names of the Block's parts, "
                f"from {', '.join(get_args(PeftTarget))} (e.g. [q, v])"
            )
        if self.rank < 1:
            raise ConfigError(f"model.peft.rank: {self.rank} must be at least 1 (e.g. 8)")
        if self.alpha <= 0:
            raise ConfigError(f"model.peft.alpha: {self.alpha} must be positive (e.g. 2 × rank)")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.peft.dropout: {self.dropout} must be in [0, 1)")


# --- LoRA ------------------------------------------------------------------------------------------
# Self-attention's q, k, v are one fused `qkv` Linear (cross-attention: `q` and a fused `kv`). LoRA on a
# subset of them is LoRA on the fused Linear with the rows of the other projections held at zero in B
# (zero-initialised, gradient masked): the update B·A then touches only the targeted rows, exactly, and the
# checkpoint keys stay the suite's. The alternative, splitting `qkv` into three Linears, would change every
# model's state dict and its fused GEMM. A masked row never moves under AdamW (zero gradient, zero moments,
# zero weight decay on zero), and it is not counted as trainable (`trainable_parameters`).


def _lora_sites(model: nn.Module, targets: tuple[str, ...]) -> dict[str, list[slice] | None]:
    """Full module name -> the rows LoRA may change (None: all) for every Linear the targets name."""
    sites: dict[str, list[slice] | None] = {}
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(module, Attention):
            q_dim, kv_dim = module.n_heads * module.head_dim, module.n_kv_heads * module.head_dim
            if module.cross:
                fused = {"k": slice(0, kv_dim), "v": slice(kv_dim, 2 * kv_dim)}
                fused_name = "kv"
                if "q" in targets:
                    sites[prefix + "q"] = None
            else:
                fused = {"q": slice(0, q_dim), "k": slice(q_dim, q_dim + kv_dim), "v": slice(q_dim + kv_dim, None)}
                fused_name = "qkv"
            rows = [rows for part, rows in fused.items() if part in targets]
            if rows:
                sites[prefix + fused_name] = None if len(rows) == len(fused) else rows
            if "out" in targets:
                sites[prefix + "out"] = None
        elif isinstance(module, FeedForward):
            for part, child in (("ffn_in", "up"), ("ffn_out", "down")):
                if part in targets:
                    sites[prefix + child] = None
    return sites


def _add_lora(model: nn.Module, cfg: PeftConfig) -> set[int]:
    from peft import LoraConfig, inject_adapter_in_model  # imports transformers: only where LoRA is asked for

    sites = _lora_sites(model, cfg.targets)
    if not sites:
        raise ConfigError(f"model.peft.targets: {list(cfg.targets)} name no Linear of {type(model).__name__}")
    config = LoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=sorted(sites))
    inject_adapter_in_model(config, model, adapter_name=ADAPTER_NAME)
    for name, rows in sites.items():
        if rows is None:
            continue
        layer = model.get_submodule(name)
        B = layer.lora_B[ADAPTER_NAME].weight  # (out_features, r)
        mask = torch.zeros(B.shape[0], 1, dtype=B.dtype, device=B.device)
        for part in rows:
            mask[part] = 1.0
        layer.register_buffer("lora_rows", mask, persistent=False)
        with torch.no_grad():
            B.mul_(mask)
        B.register_hook(lambda grad, mask=mask: grad * mask.to(grad.dtype))
    return {id(p) for n, p in model.named_parameters() if ".lora_" in n}


def merge_lora(model: nn.Module) -> nn.Module:
    """Folds every LoRA update into its base Linear and puts the plain Linear back (what peft's
    `merge_and_unload` does for a `PeftModel`; the suite injects LoRA without that wrapper). The model's
    state dict is then a plain model's. Returns `model`."""
    from peft.tuners.lora import LoraLayer

    for name, module in list(model.named_modules()):
        if isinstance(module, LoraLayer):
            module.merge(safe_merge=True)  # safe: refuses a merge that gives non-finite weights
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, module.get_base_layer())
    return model


def has_lora(model: nn.Module) -> bool:
    return any(".lora_" in name for name, _ in model.named_parameters())


# --- Adapters --------------------------------------------------------------------------------------


class Adapter(nn.Module):
    """h + up(drop(gelu(down(h)))): a bottleneck on a sublayer's output, before its residual add.
    `up` starts at zero, so a new adapter is the identity and fine-tuning starts from the base model."""

    parametrization_role = "adapter"  # its rank does not grow with width: base settings (models.parametrization)

    def __init__(self, d_model: int, size: int, dropout: float):
        super().__init__()
        self.down, self.up = nn.Linear(d_model, size), nn.Linear(size, d_model)
        self.drop = nn.Dropout(dropout)
        nn.init.normal_(self.down.weight, std=0.02)
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, h: Tensor) -> Tensor:
        return h + self.up(self.drop(F.gelu(self.down(h))))


# the Block's sublayers that get an adapter on their output (`cross` where the block has one)
ADAPTER_SITES: dict[AdapterPlacement, tuple[str, ...]] = {
    "houlsby": ("attn", "cross", "ffn"),  # Houlsby et al. 2019: after attention and after the FFN
    "pfeiffer": ("ffn",),  # Pfeiffer et al. 2020 (AdapterFusion): after the FFN only
}
assert set(ADAPTER_SITES) == set(get_args(AdapterPlacement))


def _adapt(module: nn.Module, inputs: tuple, output: Tensor) -> Tensor:
    return module.adapter(output)


def _add_adapters(model: nn.Module, cfg: PeftConfig) -> set[int]:
    from .block import Block

    added: set[int] = set()
    for block in (m for m in model.modules() if isinstance(m, Block)):
        for site in ADAPTER_SITES[cfg.placement]:
            sublayer = getattr(block, site)
            if sublayer is None:
                continue
            # a child of the sublayer (`attn.adapter.*` keys) run by a forward hook: Block is unchanged and
            # the base weights keep their names, so a base checkpoint still loads
            sublayer.adapter = Adapter(model.cfg.d_model, cfg.rank, cfg.dropout)
            sublayer.register_forward_hook(_adapt)
            added |= {id(p) for p in sublayer.adapter.parameters()}
    return added


# --- BitFit ----------------------------------------------------------------------------------------


def _bitfit(model: nn.Module, cfg: PeftConfig) -> set[int]:
    biases = {id(p) for name, p in model.named_parameters() if name.rpartition(".")[2] == "bias"}
    if not biases:
        raise ConfigError(
            "model.peft.method: bitfit trains the biases and this model has none: set --model.arch.bias true"
        )
    return biases


PEFT_METHODS: dict[PeftMethod, Callable[[nn.Module, PeftConfig], set[int]]] = {
    "none": lambda model, cfg: set(),
    "lora": _add_lora,
    "adapter": _add_adapters,
    "bitfit": _bitfit,
}
assert set(PEFT_METHODS) == set(get_args(PeftMethod))


def apply_peft(model: nn.Module, cfg: PeftConfig) -> set[int]:
    """Adds the method's parameters to `model` in place; returns the ids of the parameters it trains."""
    with warnings.catch_warnings():
        # peft looks for a transformers config on the model; the suite's models have their own
        warnings.filterwarnings("ignore", message=".*Unable to fetch remote file.*|.*model config.*")
        return PEFT_METHODS[cfg.method](model, cfg)


def trainable_parameters(model: nn.Module) -> int:
    """Parameters that training can change: those requiring grad, less LoRA rows held at zero."""
    count = sum(p.numel() for p in {id(p): p for p in model.parameters() if p.requires_grad}.values())
    for module in model.modules():
        rows = getattr(module, "lora_rows", None)
        if rows is not None:
            count -= int((rows == 0).sum()) * module.lora_B[ADAPTER_NAME].weight.shape[1]
    return count
