"""Multi-head / grouped-query attention on `F.scaled_dot_product_attention`, with a KV cache."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import ArchConfig
from .norms import build_qk_norms
from .positional import apply_rotary
from .relative_bias import ScoreMask, bias_attention


def softcap(x: Tensor, cap: float | None) -> Tensor:
    """c·tanh(x/c): x kept within ±c, unchanged near 0 (Gemma 2's attention and output logits)."""
    return x if cap is None else cap * torch.tanh(x / cap)


def softcapped_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool, scale: float | None, cap: float,
    dropout: float,
) -> Tensor:  # fmt: skip
    """SDPA's math with the scores capped before the mask: softmax(mask + c·tanh(q kᵀ·scale / c)) v. SDPA has
    no hook for it on CPU (flex_attention's score_mod could on CUDA), so the scores are built here."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = softcap((q @ k.transpose(-2, -1)) * scale, cap)
    if is_causal and mask is None:  # SDPA's is_causal: query i sees keys 0..i
        mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    probs = F.dropout(scores.softmax(-1), dropout) if dropout else scores.softmax(-1)
    return probs @ v


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
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.d_head
        q_dim, kv_dim = cfg.n_heads * cfg.d_head, cfg.kv_heads * cfg.d_head
        if cross:
            self.q = nn.Linear(cfg.d_model, q_dim, bias=cfg.bias)
            self.kv = nn.Linear(cfg.d_model, 2 * kv_dim, bias=cfg.bias)
        else:
            self.qkv = nn.Linear(cfg.d_model, q_dim + 2 * kv_dim, bias=cfg.bias)
        self.out = nn.Linear(q_dim, cfg.d_model, bias=cfg.bias)
        qk_norms = build_qk_norms(cfg, q_dim, kv_dim)
        self.q_norm, self.k_norm = qk_norms if qk_norms is not None else (None, None)
        self.qk_norm_per_head = cfg.qk_norm_scope == "head"
        self.scale = cfg.attention_scale  # None: SDPA's 1/sqrt(head_dim)
        self.dropout = cfg.dropout
        self.bias_backward = cfg.bias_backward
        self.attn_softcap = cfg.attn_softcap
        # set by `models.probes.Probe` while it records: called with (self, q, k, mask, is_causal)
        self.probe: Callable[..., None] | None = None

    def _blockwise(self, mask: Tensor | ScoreMask | None, dropout: float) -> bool:
        """A score bias is applied per block of queries (`models.relative_bias`) unless attention dropout,
        whose random mask the recomputation cannot replay, or `bias_backward: math` asks for SDPA's kernels."""
        return (
            isinstance(mask, ScoreMask)
            and self.bias_backward == "blockwise"
            and dropout == 0.0
            and self.attn_softcap is None
        )

    def _heads(self, x: Tensor, n: int, norm: nn.Module | None = None) -> Tensor:
        """(B, T, n·hd) -> (B, n, T, hd), through the query or key norm (`qk_norm`) when one is given: over the
        whole projection before the split into heads, or over each head's vector after it."""
        B, T, _ = x.shape
        if norm is not None and not self.qk_norm_per_head:
            x = norm(x)
        x = x.view(B, T, n, self.head_dim).transpose(1, 2)  # (B, n, T, hd)
        return norm(x) if norm is not None and self.qk_norm_per_head else x

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
            q = self._heads(self.q(x), self.n_heads, self.q_norm)
            if cache is not None and cache.memory is not None:
                k, v = cache.memory
            else:
                k, v = self.kv(memory).split(kv_dim, dim=-1)
                k, v = self._heads(k, self.n_kv_heads, self.k_norm), self._heads(v, self.n_kv_heads)
                if cache is not None:
                    cache.memory = (k, v)
        else:
            q, k, v = self.qkv(x).split((self.n_heads * self.head_dim, kv_dim, kv_dim), dim=-1)
            q, k = self._heads(q, self.n_heads, self.q_norm), self._heads(k, self.n_kv_heads, self.k_norm)
            v = self._heads(v, self.n_kv_heads)
            if rope is not None:  # after the query and key norms, as OLMo 2 and Qwen 3
                q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
            if cache is not None:
                k, v = cache.append(k, v, offset)
        if self.n_kv_heads != self.n_heads:
            # expanded views: SDPA's CPU kernels do not take enable_gqa, and a repeat is cheap
            group = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        if self.probe is not None:
            self.probe(self, q, k, mask, is_causal)
        dropout = self.dropout if self.training else 0.0
        if self._blockwise(mask, dropout):
            y = bias_attention(q, k, v, mask, self.scale)
        else:
            if isinstance(mask, ScoreMask):
                mask = mask.dense(q.dtype)
            if self.attn_softcap is not None:
                y = softcapped_attention(q, k, v, mask, is_causal, self.scale, self.attn_softcap, dropout)
                return self.out(y.transpose(1, 2).reshape(B, T, -1))
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal and mask is None, scale=self.scale
            )
        return self.out(y.transpose(1, 2).reshape(B, T, -1))
