"""Multi-head / grouped-query attention on `F.scaled_dot_product_attention`, with a KV cache."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .config import ArchConfig
from .positional import apply_rotary
from .relative_bias import ScoreMask, bias_attention


class LayerCache:
    """Keys and values of one attention layer, preallocated for `max_len` positions."""

    def __init__(self, max_len: int):
        self.max_len = max_len
        self.k: Tensor | None = None
        self.v: Tensor | None = None
        self.memory: tuple[Tensor, Tensor] | None = None  # cross-attention k, v (computed once)

    def append(self, k: Tensor, v: Tensor, offset: int) -> tuple[Tensor, Tensor]:
        if self.k is None:
            B, H, _, D = k.shape
            self.k = k.new_empty(B, H, self.max_len, D)
            self.v = v.new_empty(B, H, self.max_len, D)
        end = offset + k.shape[2]
        if end > self.max_len:
            raise ValueError(f"KV cache holds {self.max_len} positions, decoding needs {end}; raise max_len")
        self.k[:, :, offset:end] = k
        self.v[:, :, offset:end] = v
        return self.k[:, :, :end], self.v[:, :, :end]

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search)."""
        for name in ("k", "v"):
            if getattr(self, name) is not None:
                setattr(self, name, getattr(self, name).index_select(0, index))
        if self.memory is not None:
            self.memory = tuple(t.index_select(0, index) for t in self.memory)


class KVCache:
    """Per-layer caches of a stack plus the number of positions already decoded."""

    def __init__(self, n_layers: int, max_len: int):
        self.self_attn = [LayerCache(max_len) for _ in range(n_layers)]
        self.cross_attn = [LayerCache(max_len) for _ in range(n_layers)]
        self.length = 0

    def reorder(self, index: Tensor) -> None:
        for cache in (*self.self_attn, *self.cross_attn):
            cache.reorder(index)


class Attention(nn.Module):
    """Self-attention (fused q,k,v projection) or cross-attention (q from x, k,v from memory).

    Heads: `n_heads` query heads share `n_kv_heads` key/value heads (MHA when equal, MQA at 1).
    """

    def __init__(self, cfg: ArchConfig, cross: bool = False):
        super().__init__()
        self.cross = cross
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        q_dim, kv_dim = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        if cross:
            self.q = nn.Linear(cfg.d_model, q_dim, bias=cfg.bias)
            self.kv = nn.Linear(cfg.d_model, 2 * kv_dim, bias=cfg.bias)
        else:
            self.qkv = nn.Linear(cfg.d_model, q_dim + 2 * kv_dim, bias=cfg.bias)
        self.out = nn.Linear(q_dim, cfg.d_model, bias=cfg.bias)
        self.scale = cfg.attn_scale
        self.dropout = cfg.dropout
        self.bias_backward = cfg.bias_backward

    def _blockwise(self, mask: Tensor | ScoreMask | None, dropout: float) -> bool:
        """A score bias is applied per block of queries (`models.relative_bias`) unless attention dropout,
        whose random mask the recomputation cannot replay, or `bias_backward: math` asks for SDPA's kernels."""
        return isinstance(mask, ScoreMask) and self.bias_backward == "blockwise" and dropout == 0.0

    def _heads(self, x: Tensor, n: int) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, n, self.head_dim).transpose(1, 2)  # (B, n, T, hd)

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | ScoreMask | None = None,
        is_causal: bool = False,
        rope: tuple[Tensor, Tensor] | None = None,
        memory: Tensor | None = None,
        cache: LayerCache | None = None,
        offset: int = 0,
    ) -> Tensor:
        """x: (B, T, d). mask: additive float or boolean (True = attend), broadcast to
        (B, H, T, S), or a `ScoreMask` (a relative bias with padding and causality, applied per block of
        queries). is_causal: the rows are causal; with no mask, SDPA's own causal path (no
        materialised mask), with one, the mask already hides the future."""
        B, T, _ = x.shape
        kv_dim = self.n_kv_heads * self.head_dim
        if self.cross:
            q = self._heads(self.q(x), self.n_heads)
            if cache is not None and cache.memory is not None:
                k, v = cache.memory
            else:
                k, v = (self._heads(t, self.n_kv_heads) for t in self.kv(memory).split(kv_dim, dim=-1))
                if cache is not None:
                    cache.memory = (k, v)
        else:
            q, k, v = self.qkv(x).split((self.n_heads * self.head_dim, kv_dim, kv_dim), dim=-1)
            q, k, v = self._heads(q, self.n_heads), self._heads(k, self.n_kv_heads), self._heads(v, self.n_kv_heads)
            if rope is not None:
                q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
            if cache is not None:
                k, v = cache.append(k, v, offset)
        if self.n_kv_heads != self.n_heads:
            # expanded views: SDPA's CPU kernels do not take enable_gqa, and a repeat is cheap
            group = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        dropout = self.dropout if self.training else 0.0
        if self._blockwise(mask, dropout):
            y = bias_attention(q, k, v, mask, self.scale)
        else:
            if isinstance(mask, ScoreMask):
                mask = mask.dense(q.dtype)
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal and mask is None, scale=self.scale
            )
        return self.out(y.transpose(1, 2).reshape(B, T, -1))
