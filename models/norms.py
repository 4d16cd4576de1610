"""Normalisation layers keyed by the `norm` axis."""

from __future__ import annotations

from torch import nn

from .config import ArchConfig, NormName

# torch's own fused kernels; RMSNorm (Zhang & Sennrich 2019) has no mean and no bias.
NORMS: dict[NormName, type[nn.Module]] = {"layernorm": nn.LayerNorm, "rmsnorm": nn.RMSNorm}


def build_norm(cfg: ArchConfig) -> nn.Module:
    if cfg.norm == "layernorm":
        return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)
    return NORMS[cfg.norm](cfg.d_model, eps=cfg.norm_eps)
