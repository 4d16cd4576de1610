"""Attention with a score bias that depends on key − query distance (ALiBi, T5), without a T×T tensor.

A relative bias has one value per head and distance: (H, q_len + k_len − 1) numbers, not (H, q_len, k_len).
Handing SDPA a dense (B, H, T, S) float mask costs memory quadratic in T (2 GiB per layer at T = 8,192 and
16 heads in bf16) and, for a bias that needs a gradient, sends SDPA to its math kernel, which keeps the whole
probability tensor for the backward. Here the bias stays per distance:

- on CPU (and wherever flex_attention is not used), `_BlockwiseBiasAttention` runs SDPA's fused kernel one
  block of queries at a time with that block's (B|1, H, block, S) mask, and the backward recomputes each
  block's scores, giving dq, dk, dv and the per-distance bias gradient exactly as the math kernel's formulas
  do (torch has no CPU kernel for this: flex_attention's CPU path has no backward, and compiling it per
  shape costs a sweep of short runs again at each evaluation length); ALiBi over causal rows without
  padding skips the blocks: its bias is linear in the key's position, so it rides inside q·k as one more
  feature and SDPA's own causal kernel runs forward and backward (`_linear_bias_attention`); T5 over causal
  rows without padding attends the keys of its last bucket (one constant per head) with no mask and only a
  band of distances with the bias (`models.far_bias`);
- on CUDA, `torch.nn.attention.flex_attention` (compiled) with a `score_mod` that reads the per-distance
  table on the fly and a block mask for causality and padding; T5's table trains through the captured
  buffer's gradient.

All equal the dense path (`bias_backward: math`) to float rounding (tests/models/test_relative_bias.py).
Attention dropout needs the fused kernel's random mask in the backward, which it does not expose: with
dropout the dense path is used (`models.attention.Attention`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor

QUERY_BLOCK = 128  # queries per block: (B, H, 128, S) floats live at a time, forward and backward


@dataclass(frozen=True)
class RelativeBias:
    """A score bias per head and key − query distance.

    `per_distance[h, c]` is the bias of key j for query i where c = j − i + q_len − 1 (so c runs over
    every distance the q_len × k_len scores contain, the most negative first).
    """

    per_distance: Tensor  # (H, q_len + k_len - 1)
    q_len: int
    k_len: int
    # (H,) when the bias is slopes·(j − i) on every key a causal query sees (ALiBi's): linear in the key's
    # position once the row's constant is dropped, so it can ride inside q·k (`_linear_bias_attention`)
    slopes: Tensor | None = None
    # every distance j − i ≤ −far has the bias per_distance[:, 0] (T5's last causal bucket): those keys need
    # no mask (`models.far_bias`); None: no such distance
    far: int | None = None

    def dense(self) -> Tensor:
        """(H, q_len, k_len): row i is the window of `per_distance` starting at q_len − 1 − i."""
        return self.per_distance.unfold(1, self.k_len, 1).flip(1)


@dataclass(frozen=True)
class ScoreMask:
    """A self-attention mask kept in parts: a relative bias, key padding and causality.

    Args:
        bias: the positional scheme's score bias.
        padding: (B, 1, 1, S) additive, -inf on padded keys; None without padding.
        causal_offset: query i sees keys ≤ causal_offset + i (the KV cache's length); None: every key.
    """

    bias: RelativeBias
    padding: Tensor | None
    causal_offset: int | None

    def table(self, dtype: torch.dtype) -> Tensor:
        """The per-distance bias with causality folded in: a future key is one at distance j − i > offset,
        so hiding it is -inf on those distances, not a (T, S) mask."""
        table = self.bias.per_distance.detach().to(dtype)
        if self.causal_offset is None:
            return table
        return table.clone().index_fill_(1, torch.arange(self.bias.q_len + self.causal_offset, table.shape[1],
                                                          device=table.device), float("-inf"))  # fmt: skip

    def reversed_block(self, table: Tensor, start: int, stop: int, keys: int) -> Tensor:
        """(B|1, H, stop − start, keys): the mask of queries stop−1 down to start (last query first) over keys
        0..keys−1. Rows in reverse make the bias a plain sliding window of `table` (strides 1 and 1), which
        copies at memory speed; in query order one stride is negative, and torch copies that 5x slower."""
        window = table[:, self.bias.q_len - stop : self.bias.q_len - 1 - start + keys]
        mask = window.unfold(1, keys, 1)[None]
        return mask.contiguous() if self.padding is None else mask + self.padding[..., :keys].to(table.dtype)

    def dense(self, dtype: torch.dtype) -> Tensor:
        """(B|1, H, T, S): the whole mask, for SDPA's own kernels (dropout, `bias_backward: math`). Built from
        the bias itself (not its detached table) so that a learned bias's gradient flows through it."""
        mask = self.bias.dense().to(dtype)[None]
        if self.padding is not None:
            mask = mask + self.padding.to(dtype)
        if self.causal_offset is not None:
            q_len, k_len = self.bias.q_len, self.bias.k_len
            visible = torch.ones(q_len, k_len, dtype=torch.bool, device=mask.device).tril(self.causal_offset)
            mask = mask.masked_fill(~visible, float("-inf"))
        return mask

    def visible_keys(self, stop: int) -> int:
        """Keys a block of queries ending before `stop` can see: causal rows see none past their last query."""
        return self.bias.k_len if self.causal_offset is None else min(self.bias.k_len, self.causal_offset + stop)


def _antidiagonal_sums(grad: Tensor) -> Tensor:
    """(H, R, K) -> (H, R + K − 1): entry c sums grad[:, r, j] over r + j = c, the backward of the sliding window
    of `ScoreMask.reversed_block`. The shear: each row padded by R zeros and the whole read with a row length one
    shorter shifts row r right by r, so (r, j) lands in column r + j."""
    H, R, K = grad.shape
    return F.pad(grad, (0, R)).flatten(1)[:, : R * (K + R - 1)].view(H, R, K + R - 1).sum(1)


class _BlockwiseBiasAttention(torch.autograd.Function):
    """Each block of queries runs last query first, so that its mask is a plain window of the bias table
    (`ScoreMask.reversed_block`); only the block's own (B, H, block, hd) rows are reversed, and back."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, per_distance: Tensor, mask: ScoreMask, scale: float | None):
        out = torch.empty_like(q)
        table, T = mask.table(q.dtype), q.shape[-2]
        for start in range(0, T, QUERY_BLOCK):
            stop = min(start + QUERY_BLOCK, T)
            keys = mask.visible_keys(stop)
            out[..., start:stop, :] = F.scaled_dot_product_attention(
                q[..., start:stop, :].flip(-2), k[..., :keys, :], v[..., :keys, :],
                attn_mask=mask.reversed_block(table, start, stop, keys), scale=scale,
            ).flip(-2)  # fmt: skip
        # the mask's tensors through save_for_backward (version-checked), its sizes on ctx
        padding = mask.padding if mask.padding is not None else q.new_empty(0)
        ctx.save_for_backward(q, k, v, out, per_distance, padding)
        ctx.sizes = mask.bias.q_len, mask.bias.k_len, mask.causal_offset, mask.padding is not None
        ctx.scale = q.shape[-1] ** -0.5 if scale is None else scale
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q, k, v, out, per_distance, padding = ctx.saved_tensors
        q_len, k_len, offset, padded = ctx.sizes
        mask = ScoreMask(RelativeBias(per_distance, q_len, k_len), padding if padded else None, offset)
        scale, table, T = ctx.scale, mask.table(q.dtype), q.shape[-2]
        dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        want_bias = ctx.needs_input_grad[3]
        dbias = torch.zeros(per_distance.shape, dtype=torch.float32, device=q.device) if want_bias else None
        # rowsum(dO ∘ O) = rowsum(P ∘ dP): the softmax backward's per-row term, without P
        delta = (grad_out * out).sum(-1, keepdim=True)
        for start in range(0, T, QUERY_BLOCK):
            stop = min(start + QUERY_BLOCK, T)
            keys = mask.visible_keys(stop)
            rows = slice(start, stop)  # below, every (…, block, ·) tensor is in reverse row order
            q_b, go_b, delta_b = (t[..., rows, :].flip(-2) for t in (q, grad_out, delta))
            q_b = q_b * scale  # the scale on (B, H, block, hd), not on every (B, H, block, S) score
            k_b, v_b = k[..., :keys, :], v[..., :keys, :]
            scores = (q_b @ k_b.transpose(-2, -1)).add_(mask.reversed_block(table, start, stop, keys))
            # the scores' buffer freed as the probabilities are made: two (B, H, block, S) tensors live, not three
            probs = scores = torch.softmax(scores, dim=-1).nan_to_num_(0.0)  # a row with no visible key: no weight
            # dS = P ∘ (dO vᵀ - delta), in place in the dO vᵀ buffer
            dscores = (go_b @ v_b.transpose(-2, -1)).sub_(delta_b).mul_(probs)
            if want_bias:  # the bias is shared by the batch: its window's gradient is summed over it
                first = q_len - stop
                dbias[:, first : first + stop - start + keys - 1] += _antidiagonal_sums(dscores.sum(0).float())
            dq[..., rows, :] = (dscores @ k_b).mul_(scale).flip(-2)
            dk[..., :keys, :] += dscores.transpose(-2, -1) @ q_b
            dv[..., :keys, :] += probs.transpose(-2, -1) @ go_b
        return dq, dk, dv, dbias.to(per_distance.dtype) if want_bias else None, None, None


def _foldable(q: Tensor, mask: ScoreMask) -> bool:
    """A linear bias over causal rows without padding, in a precision that keeps the folded scores' rounding
    at float rounding: slopes·T/2 is added to each score (see `_linear_bias_attention`)."""
    bias = mask.bias
    return (
        bias.slopes is not None
        and mask.padding is None
        and mask.causal_offset == 0
        and bias.q_len == bias.k_len
        and q.dtype in (torch.float32, torch.float64)
    )


def _linear_bias_attention(q: Tensor, k: Tensor, v: Tensor, slopes: Tensor, scale: float | None) -> Tensor:
    """Causal attention with ALiBi's bias m·(j − i) as SDPA's own causal kernel, forward and backward.

    Softmax ignores a constant per row, so m·(j − i) acts as m·j: one more feature per head, 1 on the
    queries and m·j on the keys (and 0 on the values), adds it inside q·k. The positions are centred,
    m·(j − T/2), to halve the largest number added to a score.
    """
    B, H, T, hd = q.shape
    scale = hd**-0.5 if scale is None else scale
    position = torch.arange(T, device=q.device, dtype=q.dtype) - T / 2
    extra = (slopes.to(q.dtype)[:, None] * position)[None, :, :, None].expand(B, H, T, 1)
    ones, zeros = q.new_ones(B, H, T, 1), q.new_zeros(B, H, T, 1)
    y = F.scaled_dot_product_attention(
        torch.cat([q * scale, ones], -1), torch.cat([k, extra], -1), torch.cat([v, zeros], -1),
        is_causal=True, scale=1.0,
    )  # fmt: skip
    return y[..., :hd]


@lru_cache(maxsize=1)
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention  # imported on first CUDA use

    return torch.compile(flex_attention, dynamic=False)


def flex_bias_attention(q: Tensor, k: Tensor, v: Tensor, mask: ScoreMask, scale: float | None, compiled: bool = True):
    """flex_attention with the bias computed per score from the per-distance table (CUDA; the CPU forward
    runs it uncompiled for the parity tests, and has no backward)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    table, shift, offset = mask.bias.per_distance, mask.bias.q_len - 1, mask.causal_offset
    pad = mask.padding[:, 0, 0, :] if mask.padding is not None else None  # (B, S) additive

    def score_mod(score, b, h, q_idx, kv_idx):
        score = score + table[h, kv_idx - q_idx + shift].to(score.dtype)
        return score if pad is None else score + pad[b, kv_idx].to(score.dtype)

    def visible(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    B, _, T, _ = q.shape
    block_mask = None
    if offset is not None:
        block_mask = create_block_mask(visible, None, None, T, k.shape[-2], device=q.device)
    attend = _compiled_flex() if compiled else flex_attention
    return attend(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)


def bias_attention(q: Tensor, k: Tensor, v: Tensor, mask: ScoreMask, scale: float | None = None) -> Tensor:
    """softmax(q kᵀ·scale + mask) v, with the gradient to the bias's per-distance table, never building the
    (B, H, T, S) mask: flex_attention on CUDA, SDPA block by block elsewhere.

    Args:
        q, k, v: (B, H, T, hd) and (B, H, S, hd).
        mask: the bias, padding and causality.
        scale: of the scores; None is 1/√hd, as SDPA's.
    """
    if q.is_cuda:
        return flex_bias_attention(q, k, v, mask, scale)
    if _foldable(q, mask):
        return _linear_bias_attention(q, k, v, mask.bias.slopes, scale)
    from .far_bias import far_band_attention, splittable  # it builds on this module's masks

    if splittable(q, mask):
        return far_band_attention(q, k, v, mask, scale)
    return _BlockwiseBiasAttention.apply(q, k, v, mask.bias.per_distance, mask, scale)
