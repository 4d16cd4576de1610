"""T5's causal bias past its last bucket's first distance is one number per head: attend there with no mask.

With `bidirectional=False`, every key at distance j − i ≤ −far (far ≤ t5_max_distance) falls in T5's last
bucket, so its bias b_far is the same for every such (i, j). Query i then attends two disjoint sets of keys:

- the far keys j ≤ i − far: SDPA's fused causal kernel on queries far.. over keys ..T − far (query far + r sees
  keys 0..r), with no mask at all; b_far only shifts these scores, so it is added to their log-sum-exp;
- the band i − far < j ≤ i: far + block − 1 keys per block of queries, with the bucketed bias and causality
  as a mask (one mask shared by every full block past the first ones).

The two softmaxes are merged by their log-sum-exps, as split-K attention merges chunks. The backward uses the
merged output and log-sum-exp (FlashAttention's split-K backward): the far part is the fused kernel's own
backward given the merged O and lse − b_far, so that its P is the merged softmax's; the band recomputes its
scores per block (no softmax: P = exp(s − lse)) for dq, dk, dv and the table's gradient per distance. b_far's
gradient is Σ over far pairs of dS, and since each row's dS sums to zero it is minus the band's: free.
The far distances share one number, so their gradient is returned on the farthest distance (column 0): the
bucket's gradient, the sum over its distances, is the dense path's (tests/models/test_far_bias.py).

At T = 2,048 and far 113 the band is ~12% of the causal scores; the rest runs in the fused kernel.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .relative_bias import ScoreMask, _antidiagonal_sums

BAND_BLOCK = 32  # queries per band block: its keys are block + far − 1, of which ~far are seen per query
_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def splittable(q: Tensor, mask: ScoreMask) -> bool:
    """A bias constant past `far` over causal rows from position 0 without padding, with some far key, on CPU,
    in float (the parity is tested there; half precisions keep the block path)."""
    bias = mask.bias
    return (
        bias.far is not None
        and mask.padding is None
        and mask.causal_offset == 0
        and bias.q_len == bias.k_len > bias.far
        and q.device.type == "cpu"
        and q.dtype in (torch.float32, torch.float64)
    )


def _band_table(per_distance: Tensor, T: int, far: int, dtype: torch.dtype) -> Tensor:
    """The per-distance bias with the future (distance > 0) and the far part's keys (≤ −far) at -inf."""
    table = per_distance.detach().to(dtype).clone()
    table[:, T:] = float("-inf")
    table[:, : T - far] = float("-inf")
    return table


def _blocks(T: int, far: int):
    """(start, stop, first key) of each block of queries: keys first..stop−1 hold its band."""
    for start in range(0, T, BAND_BLOCK):
        yield start, min(start + BAND_BLOCK, T), max(0, start - far + 1)


def _band_mask(table: Tensor, cache: dict, T: int, start: int, stop: int, first: int) -> Tensor:
    """(1, H, stop − start, stop − first), rows last query first (a plain window of `table`, as
    `ScoreMask.reversed_block`); every full block past the first ones has the same window, built once."""
    column, keys = T - stop + first, stop - first
    key = (column, stop - start, keys)
    if key not in cache:
        window = table[:, column : column + stop - start + keys - 1]
        cache[key] = window.unfold(1, keys, 1)[None].contiguous()
    return cache[key]


class FarBandAttention(torch.autograd.Function):
    """softmax(q kᵀ·scale + bias + causal) v for a bias that is `per_distance[:, 0]` at every distance ≤ −far."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, per_distance: Tensor, far: int, scale: float | None):
        B, H, T, hd = q.shape
        scale = hd**-0.5 if scale is None else scale
        # the heads' rows contiguous: SDPA's kernels and the band's block matmuls read them ~10% faster than the
        # projection's (B, T, H, hd) layout, and the copies replace the views in what the backward keeps
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        table, masks = _band_table(per_distance, T, far, q.dtype), {}
        out, lse = torch.empty_like(q), q.new_empty(B, H, T)
        for start, stop, first in _blocks(T, far):
            o_b, lse_b = _FLASH(
                q[..., start:stop, :].flip(-2), k[..., first:stop, :], v[..., first:stop, :],
                attn_mask=_band_mask(table, masks, T, start, stop, first), scale=scale,
            )  # fmt: skip
            out[..., start:stop, :], lse[..., start:stop] = o_b.flip(-2), lse_b.flip(-1)
        o_far, lse_far = _FLASH(q[..., far:, :], k[..., : T - far, :], v[..., : T - far, :], 0.0, True, scale=scale)
        lse_far = lse_far + per_distance.detach()[:, :1].to(lse.dtype)  # b_far: the farthest distance's bias
        near = lse[..., far:]
        merged = torch.logaddexp(near, lse_far)
        out[..., far:, :].mul_((near - merged).exp_()[..., None]).addcmul_(o_far, (lse_far - merged).exp_()[..., None])
        lse[..., far:] = merged
        ctx.save_for_backward(q, k, v, out, lse, per_distance)
        ctx.far, ctx.scale = far, scale
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q, k, v, out, lse, per_distance = ctx.saved_tensors
        far, scale, T = ctx.far, ctx.scale, q.shape[-2]
        grad_out = grad_out.contiguous()
        b_far = per_distance.detach()[:, :1].to(lse.dtype)
        # the far part: the fused kernel's backward, its P made the merged softmax's by the merged lse − b_far
        dq_far, dk_far, dv_far = _FLASH_BACKWARD(
            grad_out[..., far:, :], q[..., far:, :], k[..., : T - far, :], v[..., : T - far, :], out[..., far:, :],
            lse[..., far:] - b_far, 0.0, True, scale=scale,
        )  # fmt: skip
        dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        dk[..., : T - far, :], dv[..., : T - far, :] = dk_far, dv_far
        want_bias = ctx.needs_input_grad[3]
        dbias = torch.zeros(per_distance.shape, dtype=torch.float32, device=q.device) if want_bias else None
        delta = (grad_out * out).sum(-1, keepdim=True)  # rowsum(dO ∘ O) = rowsum(P ∘ dP)
        table, masks = _band_table(per_distance, T, far, q.dtype), {}
        for start, stop, first in _blocks(T, far):
            rows = slice(start, stop)  # below, every (…, block, ·) tensor is in reverse row order
            q_b, go_b, delta_b = (t[..., rows, :].flip(-2) for t in (q, grad_out, delta))
            q_b, lse_b = q_b * scale, lse[..., rows, None].flip(-2)
            k_b, v_b = k[..., first:stop, :], v[..., first:stop, :]
            # P = exp(s − lse) with the merged lse: the band's share of each row's softmax, no softmax run
            probs = (q_b @ k_b.transpose(-2, -1)).add_(_band_mask(table, masks, T, start, stop, first))
            probs = probs.sub_(lse_b).exp_()
            dscores = (go_b @ v_b.transpose(-2, -1)).sub_(delta_b).mul_(probs)
            if want_bias:
                column = T - stop + first
                dbias[:, column : column + 2 * stop - start - first - 1] += _antidiagonal_sums(dscores.sum(0).float())
            dq[..., rows, :] = (dscores @ k_b).mul_(scale).flip(-2)
            dk[..., first:stop, :] += dscores.transpose(-2, -1) @ q_b
            dv[..., first:stop, :] += probs.transpose(-2, -1) @ go_b
        dq[..., far:, :] += dq_far
        if want_bias:  # each row's dS sums to zero: the far pairs' sum is minus the band's (column 0 got none)
            dbias[:, 0] = -dbias.sum(1)
        return dq, dk, dv, dbias.to(per_distance.dtype) if want_bias else None, None, None


def far_band_attention(q: Tensor, k: Tensor, v: Tensor, mask: ScoreMask, scale: float | None) -> Tensor:
    return FarBandAttention.apply(q, k, v, mask.bias.per_distance, mask.bias.far, scale)
