"""Normalisation layers keyed by the `norm` axis."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from .config import ArchConfig, NormName, register_name
from .plugin_checks import probe_module, variant_owner


class DynamicTanh(nn.Module):
    """Dynamic Tanh (Zhu et al. 2025, "Transformers without Normalization", Algorithm 1): γ·tanh(αx) + β,
    a learned scalar α (initialised to `alpha`) and per-channel γ (ones) and β (zeros). No statistics: a
    drop-in for a norm. Written here because torch and timm have no such layer."""

    def __init__(self, dim: int, alpha: float, bias: bool = True):
        super().__init__()
        self.alpha = nn.Parameter(torch.full((1,), float(alpha)))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        y = torch.tanh(self.alpha * x) * self.weight
        return y if self.bias is None else y + self.bias


# norm -> its layer built from the config and the α of its site (DyT's only); torch's own fused kernels for
# the others. RMSNorm (Zhang & Sennrich 2019) has no mean and no bias, so `bias` reaches LayerNorm and DyT.
NORMS: dict[NormName, Callable[[int, ArchConfig, float], nn.Module]] = {
    "layernorm": lambda dim, cfg, alpha: nn.LayerNorm(dim, eps=cfg.norm_eps, bias=cfg.bias),
    "rmsnorm": lambda dim, cfg, alpha: nn.RMSNorm(dim, eps=cfg.norm_eps),
    "dyt": lambda dim, cfg, alpha: DynamicTanh(dim, alpha, bias=cfg.bias),
}


def build_norm(cfg: ArchConfig, attention: bool = False) -> nn.Module:
    """The norm of one site; `attention`: a norm of an attention sublayer (DyT's `dyt_alpha_attention`)."""
    alpha = cfg.dyt_alpha_attention if attention and cfg.dyt_alpha_attention is not None else cfg.dyt_alpha
    return NORMS[cfg.norm](cfg.d_model, cfg, alpha)


def build_qk_norms(cfg: ArchConfig, q_dim: int, kv_dim: int) -> tuple[nn.Module, nn.Module] | None:
    """The query and key norms of one attention layer (`qk_norm`), over the whole projections or, with
    `qk_norm_scope: head`, over each head's vector; None without."""
    if cfg.qk_norm == "none":
        return None
    dims = (q_dim, kv_dim) if cfg.qk_norm_scope == "projection" else (cfg.d_head, cfg.d_head)
    return NORMS[cfg.qk_norm](dims[0], cfg, cfg.dyt_alpha), NORMS[cfg.qk_norm](dims[1], cfg, cfg.dyt_alpha)


def register_norm(name: str) -> Callable:
    """Decorator: registers a norm from outside the suite under `name` (a plugin, `models.plugins`); it is then a
    valid `model.arch.norm` (and the sites `build_norm` builds use it). The decorated callable is the layer's
    constructor, `(dim, cfg) -> nn.Module` (a class taking the width and the `ArchConfig`), whose forward maps
    (..., dim) to the same shape; it is built and run once on a small input here, so a wrong interface fails at
    registration, before any training."""

    def register(make: Callable[[int, ArchConfig], nn.Module]) -> Callable[[int, ArchConfig], nn.Module]:
        probe_module(f"norm {name!r}", lambda: make(8, ArchConfig(d_model=8, n_heads=1)), (2, 3, 8))
        register_name("norm", name, variant_owner(make))
        NORMS[name] = lambda dim, cfg, alpha: make(dim, cfg)
        return make

    return register
