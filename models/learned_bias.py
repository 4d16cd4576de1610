"""Attention with a score bias that needs a gradient (T5's learned relative bias), on the fused kernel.

SDPA sends a float mask that requires grad to the math kernel, which keeps the whole
(B, H, T, T) probability tensor for the backward pass (and builds several more in it). Here the
forward runs the fused kernel with the bias detached (it then needs no T×T state of its own), and
the backward recomputes the scores one block of queries at a time, giving dq, dk, dv and the
bias gradient exactly as the math kernel's formulas do. Torch has no kernel for this: flex_attention
does it, but on CPU only under torch.compile, whose compile cost per shape a sweep of short runs
pays again at each evaluation length (measured in `experiments/bench/seqlen.py`'s notes).

The gradients equal the math kernel's to float rounding (tests/models/test_learned_bias.py).
Attention dropout would need the fused kernel's random mask in the backward pass, which it does
not expose: with dropout the math path is used (see `models.attention.Attention`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

QUERY_BLOCK = 128  # queries per recomputed block: (B, H, 128, S) floats live at a time in the backward


class _BiasedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float | None, causal_offset: int | None):
        # detached: SDPA picks its kernel by `requires_grad`, grad mode off or not
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.detach(), scale=scale)
        ctx.save_for_backward(q, k, v, bias, out)
        ctx.scale = q.shape[-1] ** -0.5 if scale is None else scale
        ctx.causal_offset = causal_offset
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q, k, v, bias, out = ctx.saved_tensors
        scale, offset = ctx.scale, ctx.causal_offset
        q_scaled = q * scale  # the scale once on (B, H, T, hd), not on every (B, H, block, S) score
        dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        dbias = torch.zeros(bias.shape, dtype=bias.dtype, device=bias.device)
        # rowsum(dO ∘ O) = rowsum(P ∘ dP): the softmax backward's per-row term, without P
        delta = (grad_out * out).sum(-1, keepdim=True)
        T = q.shape[-2]
        for start in range(0, T, QUERY_BLOCK):
            rows = slice(start, min(start + QUERY_BLOCK, T))
            # causal rows see no key past the block's last query: its probabilities there are 0
            keys = slice(0, k.shape[-2] if offset is None else offset + rows.stop)
            q_b, go_b, k_b, v_b = q_scaled[..., rows, :], grad_out[..., rows, :], k[..., keys, :], v[..., keys, :]
            probs = torch.softmax((q_b @ k_b.transpose(-2, -1)).add_(bias[..., rows, keys]), dim=-1)
            probs.nan_to_num_(0.0)  # a row with no visible key (all padding): no weight, no gradient
            # dS = P ∘ (dO vᵀ - delta), in place in the dO vᵀ buffer
            dscores = (go_b @ v_b.transpose(-2, -1)).sub_(delta[..., rows, :]).mul_(probs)
            dbias[..., rows, keys] = _sum_to(dscores, bias[..., rows, keys].shape)
            dq[..., rows, :] = (dscores @ k_b).mul_(scale)
            dk[..., keys, :] += dscores.transpose(-2, -1) @ q_b
            dv[..., keys, :] += probs.transpose(-2, -1) @ go_b
        return dq, dk, dv, dbias, None, None


def _sum_to(grad: Tensor, shape: torch.Size) -> Tensor:
    """Sums a gradient over the dimensions its input was broadcast along (the batch of a shared bias)."""
    dims = tuple(i for i, (g, s) in enumerate(zip(grad.shape, shape)) if s == 1 and g != 1)
    return grad.sum(dims, keepdim=True) if dims else grad


def biased_attention(
    q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: float | None = None, causal_offset: int | None = None
) -> Tensor:
    """softmax(q kᵀ·scale + bias) v with the gradient to `bias`.

    Args:
        q, k, v: (B, H, T, hd) and (B, H, S, hd).
        bias: broadcastable to (B, H, T, S), -inf where a key is hidden.
        scale: of the scores; None is 1/√hd, as SDPA's.
        causal_offset: when the bias hides the future (query i sees keys ≤ offset + i), the offset;
            the backward then skips the hidden keys. None: every key may be visible.
    """
    return _BiasedAttention.apply(q, k, v, bias, scale, causal_offset)
