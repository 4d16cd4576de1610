"""ViT classifier: patches -> shared Transformer stack -> CLS token or mean pooling."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor, nn

from .base import TransformerModel
from .block import TransformerStack
from .config import POSITIONAL_FACTS, ArchConfig, PosEncoding
from .norms import build_norm
from .positional import LearnedPositions, PositionalScheme, sinusoidal_table

Pooling = Literal["cls", "mean"]


class SinCos2DPositions(PositionalScheme):
    """Fixed 2-D sin-cos table (MAE, "simple ViT"): half the channels encode the row, half the
    column; a CLS token gets the zero vector."""

    facts = POSITIONAL_FACTS["sinusoidal"]

    def __init__(self, cfg: ArchConfig, grid: int, prefix_tokens: int):
        super().__init__()
        if cfg.d_model % 4:
            raise ValueError(f"2-D sin-cos positions need d_model divisible by 4, got d_model={cfg.d_model}")
        axis = sinusoidal_table(grid, cfg.d_model // 2)
        rows, cols = axis[:, None, :].expand(grid, grid, -1), axis[None, :, :].expand(grid, grid, -1)
        table = torch.cat((rows, cols), dim=-1).reshape(grid * grid, cfg.d_model)
        table = torch.cat((torch.zeros(prefix_tokens, cfg.d_model), table))
        self.register_buffer("table", table, persistent=False)

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        return x + self.table


# pos_encoding -> its form over ViT's tokens, from (cfg, grid side, prefix tokens): exactly the schemes
# whose facts have `vit_form`; the others (rope, alibi, t5) are refused by name
VIT_POSITIONAL: dict[PosEncoding, Callable[[ArchConfig, int, int], PositionalScheme]] = {
    "learned": lambda cfg, grid, prefix: LearnedPositions(cfg, causal=False, length=grid * grid + prefix),
    "sinusoidal": SinCos2DPositions,
    "none": lambda cfg, grid, prefix: PositionalScheme(),
}
assert set(VIT_POSITIONAL) == {name for name, facts in POSITIONAL_FACTS.items() if facts.vit_form}


class ViT(TransformerModel):
    """Args:
        cfg: architecture; `pos_encoding` is `learned` (1-D table over all tokens), `sinusoidal`
            (2-D sin-cos) or `none`.
        image_size, patch_size, in_channels, num_classes: the image task.
        pool: `cls` (a learned CLS token, as ViT) or `mean` over patch tokens.
    """

    def __init__(
        self,
        cfg: ArchConfig,
        image_size: int = 32,
        patch_size: int = 4,
        in_channels: int = 3,
        num_classes: int = 10,
        pool: Pooling = "cls",
    ):
        super().__init__()
        if not cfg.positional.vit_form:
            raise ValueError(
                f"pos_encoding={cfg.pos_encoding!r} is not supported by ViT; choose one of "
                f"{', '.join(map(repr, VIT_POSITIONAL))} ('sinusoidal' is the 2-D sin-cos table)"
            )
        if image_size % patch_size:
            raise ValueError(f"image_size={image_size} is not divisible by patch_size={patch_size}")
        if pool not in ("cls", "mean"):
            raise ValueError(f"pool={pool!r} is not valid; choose one of 'cls', 'mean'")
        self.cfg, self.pool = cfg, pool
        grid = image_size // patch_size
        self.num_tokens = grid * grid + (pool == "cls")
        self.patch = nn.Conv2d(in_channels, cfg.d_model, patch_size, stride=patch_size)
        self.cls = nn.Parameter(torch.zeros(1, 1, cfg.d_model)) if pool == "cls" else None
        positional = VIT_POSITIONAL[cfg.pos_encoding](cfg, grid, int(pool == "cls"))
        self.stack = TransformerStack(cfg, causal=False, positional=positional, final_norm=False)
        # the final norm after pooling: for CLS it equals norm-then-select; for mean it is timm's fc_norm
        self.norm = build_norm(cfg) if cfg.norm_placement == "pre" else nn.Identity()
        self.head = nn.Linear(cfg.d_model, num_classes)
        self.init_weights()

    def forward(self, images: Tensor) -> Tensor:
        """images (B, C, H, W) -> logits (B, num_classes)."""
        x = self.patch(images).flatten(2).transpose(1, 2)  # (B, N, d)
        if self.cls is not None:
            x = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1)
        h = self.stack(x)
        pooled = h[:, 0] if self.cls is not None else h.mean(dim=1)
        return self.head(self.norm(pooled))

    def flops_per_image(self) -> float:
        conv = 2.0 * self.patch.weight.numel() * (self.num_tokens - (self.cls is not None))
        return self.flops_per_token(self.num_tokens) * self.num_tokens + conv
