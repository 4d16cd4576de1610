"""ViT classifier: patches -> shared Transformer stack -> CLS token or mean pooling.

Every positional form here also positions a patch grid of another side than the one it was built
for (an image of another size, same patch size): learned tables are resampled over the grid
(Dosovitskiy et al. 2020 §3.2, "fine-tuning and higher resolution"), the sin-cos table is
recomputed, `none` has nothing to change. A CLS token is never on the grid: it keeps its row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import softcap
from .base import TransformerModel
from .block import TransformerStack
from .config import POSITIONAL_FACTS, ArchConfig, PosEncoding
from .norms import build_norm
from .positional import LearnedPositions, PositionalScheme, sinusoidal_table

Pooling = Literal["cls", "mean"]
# a `learned` table: one row per token (ViT's 1-D) or a row table and a column table (App. D.4's 2-D)
LearnedLayout = Literal["1d", "2d"]


def grid_side(tokens: int, prefix_tokens: int) -> int:
    """The side of the square patch grid under `tokens` tokens (ViT refuses non-square images)."""
    return math.isqrt(tokens - prefix_tokens)


def grid_table(rows: Tensor, cols: Tensor, prefix_tokens: int) -> Tensor:
    """Per-axis tables (side, d/2) -> (prefix + side², d) in raster order: the first half of the
    channels encodes the row, the second half the column; prefix tokens (CLS) get the zero vector."""
    side, half = rows.shape
    grid = torch.cat((rows[:, None, :].expand(side, side, half), cols[None, :, :].expand(side, side, half)), dim=-1)
    return torch.cat((rows.new_zeros(prefix_tokens, 2 * half), grid.reshape(side * side, 2 * half)))


def _even_channels(cfg: ArchConfig, multiple: int, scheme: str) -> None:
    if cfg.d_model % multiple:
        raise ValueError(f"{scheme} positions need d_model divisible by {multiple}, got d_model={cfg.d_model}")


class SinCos2DPositions(PositionalScheme):
    """Fixed 2-D sin-cos table (MAE, "simple ViT"): half the channels encode the row, half the
    column; a CLS token gets the zero vector. Another grid (images of another size) gets the same
    functions at the trained grid's coordinates of its patch centres, (i + 0.5) * grid / new - 0.5: the
    table interpolated, as MAE interpolates its fixed `pos_embed` for a new resolution. Recomputing it
    over 0..new-1 instead would move every position (index 3 is an edge of a 4x4 grid, the middle of a
    6x6 one)."""

    facts = POSITIONAL_FACTS["sinusoidal"]

    def __init__(self, cfg: ArchConfig, grid: int, prefix_tokens: int):
        super().__init__()
        _even_channels(cfg, 4, "2-D sin-cos")
        self.grid, self.prefix, self.dim = grid, prefix_tokens, cfg.d_model
        self.register_buffer("table", self._table(grid), persistent=False)

    def _table(self, grid: int) -> Tensor:
        centres = (torch.arange(grid) + 0.5) * (self.grid / grid) - 0.5  # 0, 1, ..., grid - 1 at the trained grid
        axis = sinusoidal_table(grid, self.dim // 2, positions=centres)
        return grid_table(axis, axis, self.prefix)

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        grid = grid_side(x.shape[1], self.prefix)
        return x + (self.table if grid == self.grid else self._table(grid).to(self.table))


class LearnedGridPositions(LearnedPositions):
    """ViT's 1-D learned table, one row per token (CLS first, then the patches in raster order), as
    timm's `pos_embed`. Another grid reads the patch rows resampled as a 2-D image (timm's
    `resample_abs_pos_embed`: bicubic, antialiased when shrinking)."""

    def __init__(self, cfg: ArchConfig, grid: int, prefix_tokens: int):
        super().__init__(cfg, causal=False, length=grid * grid + prefix_tokens)
        self.grid, self.prefix = grid, prefix_tokens

    def _resampled(self, rows: Tensor, old: int, new: int) -> Tensor:
        """A table's rows (prefix + old², d) for a new x new grid."""
        from timm.layers import resample_abs_pos_embed  # imported on use: `import timm` takes seconds

        return resample_abs_pos_embed(rows[None], [new, new], [old, old], self.prefix)[0]

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        grid = grid_side(x.shape[1], self.prefix)
        if grid == self.grid:
            return super().embed(x, offset)
        return x + self._resampled(self.table.weight[self.first :], self.grid, grid)

    def adapt_state(self, state: dict[str, Tensor], name: str) -> None:
        """A saved table of another grid (trained at another image size) resampled to this one, in `state`."""
        key = f"{name}.table.weight"
        table = state.get(key)
        if table is not None and table.shape != self.table.weight.shape:
            old = grid_side(table.shape[0] - self.first, self.prefix)
            state[key] = torch.cat((table[: self.first], self._resampled(table[self.first :], old, self.grid)))


class Learned2DPositions(PositionalScheme):
    """Learned 2-D positions (Dosovitskiy et al. 2020, App. D.4): a row table and a column table of
    d/2 channels each, concatenated per patch, so 2·side rows are learned instead of side². Another
    grid interpolates each table along its axis (linear). A CLS token gets the zero vector."""

    facts = POSITIONAL_FACTS["learned"]

    def __init__(self, cfg: ArchConfig, grid: int, prefix_tokens: int):
        super().__init__()
        _even_channels(cfg, 2, "learned 2-D")
        self.grid, self.prefix = grid, prefix_tokens
        self.rows, self.cols = nn.Embedding(grid, cfg.d_model // 2), nn.Embedding(grid, cfg.d_model // 2)

    @staticmethod
    def _axis(weight: Tensor, grid: int) -> Tensor:
        if grid == weight.shape[0]:
            return weight
        return F.interpolate(weight.T[None], size=grid, mode="linear", align_corners=False)[0].T

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        grid = grid_side(x.shape[1], self.prefix)
        return x + grid_table(self._axis(self.rows.weight, grid), self._axis(self.cols.weight, grid), self.prefix)

    def adapt_state(self, state: dict[str, Tensor], name: str) -> None:
        """Saved row and column tables of another grid interpolated to this one, in `state`."""
        for axis in ("rows", "cols"):
            key = f"{name}.{axis}.weight"
            if key in state:
                state[key] = self._axis(state[key], self.grid)


# pos_encoding -> its form over ViT's tokens, from (cfg, grid side, prefix tokens): exactly the schemes
# whose facts have `vit_form`; the others (rope, alibi, t5) are refused by name
VIT_POSITIONAL: dict[PosEncoding, Callable[[ArchConfig, int, int], PositionalScheme]] = {
    "learned": LearnedGridPositions,
    "sinusoidal": SinCos2DPositions,
    "none": lambda cfg, grid, prefix: PositionalScheme(),
}
assert set(VIT_POSITIONAL) == {name for name, facts in POSITIONAL_FACTS.items() if facts.vit_form}
# `learned_layout` -> the form of a `learned` table
LEARNED_LAYOUTS: dict[LearnedLayout, Callable[[ArchConfig, int, int], PositionalScheme]] = {
    "1d": LearnedGridPositions,
    "2d": Learned2DPositions,
}
assert set(LEARNED_LAYOUTS) == set(get_args(LearnedLayout))


def _names(literal) -> str:
    return ", ".join(map(repr, get_args(literal)))


def check_vit_arch(cfg: ArchConfig, learned_layout: LearnedLayout = "1d") -> None:
    """ViT's constraints on its architecture that need no data: run when a ViT is built, and by the CLI right
    after parsing (`ImageClassifier.check_arguments`), so a sweep refuses the cell before any run starts."""
    if not cfg.positional.vit_form:
        raise ValueError(
            f"pos_encoding={cfg.pos_encoding!r} is not supported by ViT; choose one of "
            f"{', '.join(map(repr, VIT_POSITIONAL))} ('sinusoidal' is the 2-D sin-cos table)"
        )
    if learned_layout not in LEARNED_LAYOUTS:
        raise ValueError(f"learned_layout={learned_layout!r} is not valid; choose one of {_names(LearnedLayout)}")
    if learned_layout != "1d" and cfg.pos_encoding != "learned":
        raise ValueError(
            f"learned_layout={learned_layout!r} shapes a learned table, but pos_encoding={cfg.pos_encoding!r}; "
            "set pos_encoding='learned' or leave learned_layout at '1d'"
        )
    if cfg.pos_encoding == "sinusoidal":
        _even_channels(cfg, 4, "2-D sin-cos")
    if cfg.pos_encoding == "learned" and learned_layout == "2d":
        _even_channels(cfg, 2, "learned 2-D")


class ViT(TransformerModel):
    """Args:
    cfg: architecture; `pos_encoding` is `learned` (a table, see `learned_layout`), `sinusoidal`
        (2-D sin-cos) or `none`.
    image_size, patch_size, in_channels, num_classes: the image task. Square images of another
        size (a multiple of `patch_size`) run too, with the position table resampled.
    pool: `cls` (a learned CLS token, as ViT) or `mean` over patch tokens.
    learned_layout: a `learned` table's form: `1d`, one row per token (ViT, timm's `pos_embed`),
        or `2d`, a row and a column table (Dosovitskiy et al. App. D.4). Only with `learned`.
    """

    head_modules = ("head",)  # what a fine-tune may replace or train alone (models/peft.py)
    readout_name = "head"

    def __init__(
        self,
        cfg: ArchConfig,
        image_size: int = 32,
        patch_size: int = 4,
        in_channels: int = 3,
        num_classes: int = 10,
        pool: Pooling = "cls",
        learned_layout: LearnedLayout = "1d",
    ):
        super().__init__()
        check_vit_arch(cfg, learned_layout)
        if image_size % patch_size:
            raise ValueError(f"image_size={image_size} is not divisible by patch_size={patch_size}")
        if pool not in ("cls", "mean"):
            raise ValueError(f"pool={pool!r} is not valid; choose one of 'cls', 'mean'")
        self.cfg, self.pool, self.learned_layout = cfg, pool, learned_layout
        self.patch_size = patch_size
        grid = image_size // patch_size
        self.num_tokens = grid * grid + (pool == "cls")
        self.patch = nn.Conv2d(in_channels, cfg.d_model, patch_size, stride=patch_size)
        self.cls = nn.Parameter(torch.zeros(1, 1, cfg.d_model)) if pool == "cls" else None
        form = LEARNED_LAYOUTS[learned_layout] if cfg.pos_encoding == "learned" else VIT_POSITIONAL[cfg.pos_encoding]
        positional = form(cfg, grid, int(pool == "cls"))
        self.stack = TransformerStack(cfg, causal=False, positional=positional, final_norm=False)
        # the final norm after pooling: for CLS it equals norm-then-select; for mean it is timm's fc_norm
        self.norm = build_norm(cfg) if cfg.final_norm else nn.Identity()
        self.head = nn.Linear(cfg.d_model, num_classes)
        self.init_weights()

    def task_args(self) -> dict:
        """The arguments besides `cfg` that build a ViT of this one's task (image size, classes, pooling)."""
        side = grid_side(self.num_tokens, int(self.cls is not None)) * self.patch_size
        return dict(image_size=side, patch_size=self.patch_size, in_channels=self.patch.in_channels,
                    num_classes=self.head.out_features, pool=self.pool, learned_layout=self.learned_layout)  # fmt: skip

    def token_coordinates(self, tokens: int) -> Tensor:
        """(tokens, 2) each token's patch position in pixels (row, column), for the mean attention distance in
        image space (Dosovitskiy et al. 2020, Fig. 7); the CLS token, on no patch, is nan."""
        prefix = int(self.cls is not None)
        side = grid_side(tokens, prefix)
        rows, cols = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
        patches = torch.stack((rows.flatten(), cols.flatten()), dim=-1).float() * self.patch_size
        return torch.cat((torch.full((prefix, 2), float("nan")), patches))

    def forward(self, images: Tensor) -> Tensor:
        """images (B, C, H, W) -> logits (B, num_classes); H = W, a multiple of `patch_size`."""
        height, width = images.shape[-2:]
        if height != width or height % self.patch_size:
            raise ValueError(
                f"images of {height}x{width}: ViT takes square images whose side is a multiple of "
                f"patch_size={self.patch_size}; resize them"
            )
        x = self.patch(images).flatten(2).transpose(1, 2)  # (B, N, d)
        if self.cls is not None:
            x = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1)
        h = self.stack(x)
        pooled = h[:, 0] if self.cls is not None else h.mean(dim=1)
        return softcap(self.head(self.readout_input(self.norm(pooled))), self.cfg.logit_softcap)

    def adapt_state_dict(self, state: dict[str, Tensor]) -> dict[str, Tensor]:
        """`state` with learned position tables of another patch grid (a checkpoint trained at another
        image size) resampled to this model's, as `forward` reads them for another size; timm's
        `checkpoint_filter_fn` does the same for its `pos_embed`."""
        state = dict(state)
        for name, module in self.named_modules():
            if hasattr(module, "adapt_state"):
                module.adapt_state(state, name)
        return state

    def flops_per_image(self) -> float:
        conv = 2.0 * self.patch.weight.numel() * (self.num_tokens - (self.cls is not None))
        return self.flops_per_token(self.num_tokens) * self.num_tokens + conv
