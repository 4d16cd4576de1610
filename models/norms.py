"""Normalisation layers keyed by the `norm` axis."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from .config import ArchConfig, NormName

# norm -> its layer built from the config; torch's own fused kernels. RMSNorm (Zhang & Sennrich
# 2019) has no mean and no bias, so `bias` reaches LayerNorm only.
NORMS: dict[NormName, Callable[[ArchConfig], nn.Module]] = {
    "layernorm": lambda cfg: nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias),
    "rmsnorm": lambda cfg: nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps),
}


def build_norm(cfg: ArchConfig) -> nn.Module:
    return NORMS[cfg.norm](cfg)
