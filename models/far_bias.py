"""T5's causal bias past its last bucket's first distance is one number per head: attend there with no mask.

With `bidirectional=False`, every key at distance j − i ≤ −far (far ≤ t5_max_distance) falls in T5's last
bucket, so its bias b_far is the same for every such (i, j). Query i then attends two disjoint sets of keys:

- the far keys j ≤ i − far: SDPA's fused causal kernel on queries far.. over keys ..T − far (query far + r sees
  keys 0..r), with no mask at all; b_far only shifts these scores, so it is added to their log-sum-exp;
- the band i − far < j ≤ i: per block of queries, the keys from far − 1 before it (rounded up to whole blocks)
  to its last, with the bucketed bias and causality as a mask; the forward runs every block at once (the blocks
  in SDPA's batch, one (H, block, window) mask), the backward one block at a time.

The two softmaxes are merged by their log-sum-exps, as split-K attention merges chunks. The backward uses the
merged output and log-sum-exp (FlashAttention's split-K backward): the far part is the fused kernel's own
backward given the merged O and lse − b_far, so that its P is the merged softmax's; the band recomputes its
scores per block (no softmax: P = exp(s − lse)) for dq, dk, dv and the table's gradient per distance. b_far's
gradient is Σ over far pairs of dS, and since each row's dS sums to zero it is minus the band's: free.
The far distances share one number, so their gradient is returned on the farthest distance (column 0): the
bucket's gradient, the sum over its distances, is the dense path's (tests/models/test_far_bias.py).

At T = 2,048 and far 113 the band is ~15% of the causal scores (113 of each row's ~1,024, in windows of 160
to 192 keys); the rest runs in the fused kernel. Selected by `bias_backward: blockwise` (the default) wherever
`splittable` holds; elsewhere the per-block path of `models.relative_bias`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.profiler import record_function

from .relative_bias import ScoreMask

# queries per block of the band (each over the far − 1 keys before it, rounded up to whole blocks, and its own):
# measured at T = 2,048, far 113, head width 16, the fastest of 8/16/32/64 for each
FORWARD_BLOCK, BACKWARD_BLOCK = 64, 32
_NEGLIGIBLE_P = 8.7e-27  # e^−60
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


def _pad(far: int, block: int) -> int:
    """Keys before a block of queries that its band reaches: far − 1, rounded up to whole blocks."""
    return -(-(far - 1) // block) * block


def _band_mask(table: Tensor, T: int, rows: int, keys: int, before: int) -> Tensor:
    """(H, rows, keys): query r against key j at distance j − before − r, read from the table (a distance past
    its ends is a masked one: −inf there, as at the ends)."""
    columns = torch.arange(keys) - before - torch.arange(rows)[:, None] + T - 1
    return table[:, columns.clamp_(0, 2 * T - 2).to(table.device)]


def _windows(t: Tensor, n: int, block: int, width: int) -> Tensor:
    """(B·n, H, width, hd): window i is keys i·block .. i·block + width − 1 of t (B, H, L, hd), L a multiple of
    block; copied a block of keys at a time, 4x faster than one copy of the overlapping windows' permuted view."""
    B, H, L, hd = t.shape
    out, blocks = t.new_empty(B, n, H, width, hd), t.unflatten(2, (L // block, block))
    for part in range(width // block):
        out[:, :, :, part * block : (part + 1) * block] = blocks[:, :, part : part + n].transpose(1, 2)
    return out.flatten(0, 1)


def _band_forward(q: Tensor, k: Tensor, v: Tensor, table: Tensor, far: int, scale: float) -> tuple[Tensor, Tensor]:
    """The band's output and log-sum-exp, (B, H, T, hd) and (B, H, T), in two fused calls: the first `pad`
    queries over the first `pad` keys, then every later block of queries over its window of keys, the blocks
    in the batch dimension so that one (H, block, window) mask serves them all."""
    B, H, T, hd = q.shape
    block = FORWARD_BLOCK
    pad = _pad(far, block)
    lead = min(T, pad)
    out, lse = torch.empty_like(q), q.new_empty(B, H, T)
    out[..., :lead, :], lse[..., :lead] = _FLASH(
        q[..., :lead, :], k[..., :lead, :], v[..., :lead, :], attn_mask=_band_mask(table, T, lead, lead, 0)[None],
        scale=scale,
    )  # fmt: skip
    if T > lead:
        n = -(-(T - lead) // block)
        tail = n * block - (T - lead)  # padded queries, and keys that are future to every real query
        q_b = F.pad(q[..., lead:, :], (0, 0, 0, tail)).unflatten(2, (n, block)).transpose(1, 2).flatten(0, 1)
        k_b, v_b = (_windows(F.pad(t, (0, 0, 0, tail)), n, block, pad + block) for t in (k, v))
        o_b, lse_b = _FLASH(q_b, k_b, v_b, attn_mask=_band_mask(table, T, block, pad + block, pad)[None], scale=scale)
        out[..., lead:, :] = o_b.unflatten(0, (B, n)).transpose(1, 2).flatten(2, 3)[..., : T - lead, :]
        lse[..., lead:] = lse_b.unflatten(0, (B, n)).transpose(1, 2).flatten(2, 3)[..., : T - lead]
    return out, lse


def _merge_far(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, b_far: Tensor, far: int, scale: float):
    """The far keys' attention, merged into the band's `out` and `lse` in place (rows far.. have far keys)."""
    T = q.shape[-2]
    with record_function("far_bias.far"):
        o_far, lse_far = _FLASH(q[..., far:, :], k[..., : T - far, :], v[..., : T - far, :], 0.0, True, scale=scale)
    with record_function("far_bias.merge"):
        lse_far += b_far
        near = lse[..., far:]
        merged = torch.logaddexp(near, lse_far)
        out[..., far:, :].mul_((near - merged).exp_()[..., None]).addcmul_(o_far, (lse_far - merged).exp_()[..., None])
        lse[..., far:] = merged


def _band_backward(q, k, v, grad_out, lse, delta, table, far: int, scale: float, want_bias: bool):
    """The band's share of dq, dk, dv and of the table's gradient per distance, one block of queries at a time
    (a block's (B, H, 32, 160) scores at far 113 stay in cache; larger steps were slower), with P = exp(s − lse)
    from the merged lse (no softmax run)."""
    H, T = q.shape[1], q.shape[2]
    block = BACKWARD_BLOCK
    pad = _pad(far, block)
    width = pad + block
    band = _band_mask(table, T, block, width, pad)  # (H, block, width): a block's rows over its window of keys
    dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
    dsum = torch.zeros(H, block, width, dtype=torch.float32, device=q.device) if want_bias else None
    q = q * scale  # the scale on (B, H, T, hd) once, not on every block's scores
    for start in range(0, T, block):
        stop, first = min(start + block, T), max(0, start - pad)
        rows, keys = slice(start, stop), slice(first, stop)
        window = (slice(None), slice(0, stop - start), slice(first - start + pad, stop - start + pad))
        q_b, go_b, delta_b, lse_b = q[..., rows, :], grad_out[..., rows, :], delta[..., rows, :], lse[..., rows]
        k_b, v_b = k[..., keys, :], v[..., keys, :]
        # exp below e^−87 (masked keys' −inf, scores far under the row's lse) leaves the vector path: 4x slower
        # on x86. The clamped P, e^−87, then makes subnormal products in the matmuls below, which x86 computes
        # ~20x slower unless the process flushes them to zero as `cli.py` does (without: 212 ms, not 28, at
        # B 4, H 8, T 1,024, 1 thread): P < e^−60 is set to 0, exact within float rounding of every sum it enters
        probs = (q_b @ k_b.transpose(-2, -1)).add_(band[window]).sub_(lse_b[..., None]).clamp_min_(-87.0).exp_()
        F.threshold(probs, _NEGLIGIBLE_P, 0.0, inplace=True)
        dscores = (go_b @ v_b.transpose(-2, -1)).sub_(delta_b).mul_(probs)  # dS = P ∘ (dO vᵀ − delta)
        if want_bias:
            dsum[window] += dscores.sum(0).float()
        dq[..., rows, :] = (dscores @ k_b).mul_(scale)
        dk[..., keys, :] += dscores.transpose(-2, -1) @ q_b
        dv[..., keys, :] += probs.transpose(-2, -1) @ go_b
    dbias = None
    if want_bias:  # entry (r, j) of a window is at the distance `_band_mask` reads
        columns = torch.arange(width) - pad - torch.arange(block)[:, None] + T - 1
        dbias = torch.zeros(table.shape, dtype=torch.float32, device=q.device)
        dbias.index_add_(1, columns.clamp_(0, 2 * T - 2).flatten().to(q.device), dsum.flatten(1))
    return dq, dk, dv, dbias


class FarBandAttention(torch.autograd.Function):
    """softmax(q kᵀ·scale + bias + causal) v for a bias that is `per_distance[:, 0]` at every distance ≤ −far.
    Profiled, its parts are labelled `far_bias.band`, `.far`, `.merge`, `.far_backward`, `.band_backward`."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, per_distance: Tensor, far: int, scale: float | None):
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        # the heads' rows contiguous: SDPA's kernels and the band's block matmuls read them ~10% faster than the
        # projection's (B, T, H, hd) layout, and the copies replace the views in what the backward keeps
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        with record_function("far_bias.band"):
            out, lse = _band_forward(q, k, v, _band_table(per_distance, q.shape[-2], far, q.dtype), far, scale)
        _merge_far(q, k, v, out, lse, _b_far(per_distance, lse.dtype), far, scale)
        ctx.save_for_backward(q, k, v, out, lse, per_distance)
        ctx.far, ctx.scale = far, scale
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q, k, v, out, lse, per_distance = ctx.saved_tensors
        far, scale, T = ctx.far, ctx.scale, q.shape[-2]
        grad_out = grad_out.contiguous()
        with record_function("far_bias.far_backward"):
            # the fused kernel's backward, its P made the merged softmax's by the merged lse − b_far
            dq_far, dk_far, dv_far = _FLASH_BACKWARD(
                grad_out[..., far:, :], q[..., far:, :], k[..., : T - far, :], v[..., : T - far, :],
                out[..., far:, :], lse[..., far:] - _b_far(per_distance, lse.dtype), 0.0, True, scale=scale,
            )  # fmt: skip
        with record_function("far_bias.band_backward"):
            delta = (grad_out * out).sum(-1, keepdim=True)  # rowsum(dO ∘ O) = rowsum(P ∘ dP)
            table, want_bias = _band_table(per_distance, T, far, q.dtype), ctx.needs_input_grad[3]
            dq, dk, dv, dbias = _band_backward(q, k, v, grad_out, lse, delta, table, far, scale, want_bias)
            dq[..., far:, :] += dq_far
            dk[..., : T - far, :] += dk_far
            dv[..., : T - far, :] += dv_far
        if want_bias:  # each row's dS sums to zero: the far pairs' sum is minus the band's (column 0 got none)
            dbias[:, 0] = -dbias.sum(1)
        return dq, dk, dv, dbias.to(per_distance.dtype) if want_bias else None, None, None


def _b_far(per_distance: Tensor, dtype: torch.dtype) -> Tensor:
    """(H, 1): the far keys' bias, the farthest distance's."""
    return per_distance.detach()[:, :1].to(dtype)


def far_band_attention(q: Tensor, k: Tensor, v: Tensor, mask: ScoreMask, scale: float | None) -> Tensor:
    return FarBandAttention.apply(q, k, v, mask.bias.per_distance, mask.bias.far, scale)
