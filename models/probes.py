"""Probes of one forward pass, for the training diagnostics (`lit_modules.diagnostics_callbacks`): per attention module
and head the attention entropy, mean attention distance and largest attention logit; the residual stream's RMS
after each block; the output logits' mean, max and log Z.

The fused attention kernels never materialise the attention probabilities, so a probed attention module
recomputes them (without gradient) from its queries and keys for the first `rows` sequences of the batch. The
probes draw no random numbers and change no tensor of the forward: a probed step trains exactly as an unprobed one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .attention import Attention, softcap
from .block import Block
from .relative_bias import ScoreMask


@dataclass
class AttentionStats:
    """One attention module's statistics, one value per head, averaged over the probed (non-padding) queries.

    Args:
        entropy: −Σ_j p_ij log p_ij, in nats (log S for uniform attention over S keys).
        distance: Σ_j p_ij ‖c_i − c_j‖ between the tokens' coordinates (`token_coordinates`); nan for
            cross-attention, whose keys are another sequence.
        max_logit: the largest raw attention logit q·k·scale over the visible pairs, before any bias or soft-cap
            (Wortsman et al. 2023's attention-logit growth).
    """

    entropy: Tensor
    distance: Tensor
    max_logit: Tensor


def _visible_and_bias(
    mask: Tensor | ScoreMask | None, is_causal: bool, T: int, S: int, device: torch.device
) -> tuple[Tensor, Tensor]:
    """The attention mask as (visible pairs, additive bias on them), each broadcastable to (B, H, T, S)."""
    if isinstance(mask, ScoreMask):
        mask = mask.dense(torch.float32)
    if mask is None:
        visible = torch.ones(T, S, dtype=torch.bool, device=device)
        return (visible.tril(S - T) if is_causal else visible), torch.zeros((), device=device)
    if mask.dtype == torch.bool:
        return mask, torch.zeros((), device=device)
    mask = mask.float()
    visible = torch.isfinite(mask)
    return visible, mask.masked_fill(~visible, 0.0)


def attention_stats(
    q: Tensor,
    k: Tensor,
    mask: Tensor | ScoreMask | None,
    is_causal: bool,
    scale: float | None,
    cap: float | None,
    coordinates: Tensor | None,
) -> AttentionStats:
    """Statistics of softmax(cap(q kᵀ·scale) + mask), the probabilities the attention module applies.

    Args:
        q: (B, H, T, hd) queries, k: (B, H, S, hd) keys (GQA's key heads already repeated per query head).
        mask: the module's mask: None, boolean (True = attend), additive, or a `ScoreMask`.
        is_causal: with no mask, query i sees keys 0..i.
        scale: the logit scale (None: 1/sqrt(hd)); cap: the attention soft-cap, if any.
        coordinates: (T, k) each token's coordinates for the distance (self-attention); rows of nan (a CLS token)
            are left out of it; None: no distance.
    """
    B, H, T, _ = q.shape
    S = k.shape[2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    logits = (q.float() @ k.float().transpose(-2, -1)) * scale  # (B, H, T, S)
    visible, bias = _visible_and_bias(mask, is_causal, T, S, q.device)
    first = lambda t: t[:B] if t.dim() == 4 else t  # noqa: E731 (a per-sequence mask: the probed sequences')
    visible = first(visible).expand(B, H, T, S)
    max_logit = logits.masked_fill(~visible, float("-inf")).amax(dim=(0, 2, 3))
    scores = (softcap(logits, cap) + first(bias)).masked_fill(~visible, float("-inf"))
    probs = scores.softmax(-1).nan_to_num(0.0)  # a row that sees no key (none in practice) counts as empty
    # real queries: any visible key; in self-attention also themselves (a padded query hides its own column)
    queries = visible.any(-1)
    if T == S:
        queries = queries & visible.diagonal(dim1=-2, dim2=-1)
    weight = queries.float()
    per_head = lambda values: (values * weight).sum((0, 2)) / weight.sum((0, 2)).clamp_min(1)  # noqa: E731
    entropy = per_head(torch.special.entr(probs).sum(-1))
    distance = torch.full((H,), float("nan"), device=q.device)
    if coordinates is not None and T == S:
        coords = coordinates.to(q.device, torch.float32)
        placed = torch.isfinite(coords).all(-1)  # (T,)
        gaps = torch.cdist(coords.nan_to_num(0.0), coords.nan_to_num(0.0)) * (placed[:, None] & placed[None, :])
        weight = weight * placed
        distance = (probs * gaps).sum(-1).mul(weight).sum((0, 2)) / weight.sum((0, 2)).clamp_min(1)
    return AttentionStats(entropy=entropy, distance=distance, max_logit=max_logit)


def short_name(module_name: str) -> str:
    """`stack.blocks.3.attn` -> `block3.attn`, `decoder.blocks.0.cross` -> `decoder.block0.cross`."""
    name = re.sub(r"(^|\.)blocks\.(\d+)", r"\1block\2", module_name)
    return re.sub(r"^stack\.", "", name)


def token_coordinates(model: nn.Module, tokens: int) -> Tensor | None:
    """(tokens, k) coordinates for the attention distance: the model's own (`token_coordinates`, e.g. ViT's
    pixel positions of its patches), else the token index."""
    own = getattr(model, "token_coordinates", None)
    return own(tokens) if own is not None else torch.arange(tokens, dtype=torch.float32)[:, None]


class Probe:
    """While active (`with Probe(model) as probe:`), records what the forward passes through the model:
    `attention` (module name -> `AttentionStats`), `residual_rms` (block name -> RMS of its output) and `output`
    (the output logits' mean, max and mean log Z). A module run twice (activation checkpointing's recomputation)
    keeps its last record, the same values.

    Args:
        model: one of the suite's models.
        rows: sequences of the batch whose attention probabilities are recomputed.
    """

    def __init__(self, model: nn.Module, rows: int = 2):
        self.model, self.rows = model, rows
        self.attention: dict[str, AttentionStats] = {}
        self.residual_rms: dict[str, Tensor] = {}
        self.output: dict[str, Tensor] = {}
        self._hooks: list = []
        self._attention_modules = [(short_name(n), m) for n, m in model.named_modules() if isinstance(m, Attention)]

    def blocks(self) -> list[tuple[str, Block]]:
        return [(short_name(n), m) for n, m in self.model.named_modules() if isinstance(m, Block)]

    def __enter__(self) -> Probe:
        for name, module in self._attention_modules:
            module.probe = self._attention_probe(name)
        for name, block in self.blocks():
            self._hooks.append(block.register_forward_hook(self._residual_hook(name)))
        self._hooks.append(self.model.register_forward_hook(self._output_hook))
        return self

    def __exit__(self, *exc) -> None:
        for _, module in self._attention_modules:
            module.probe = None
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()

    def _attention_probe(self, name: str):
        @torch.no_grad()
        def probe(module: Attention, q: Tensor, k: Tensor, mask, is_causal: bool) -> None:
            rows = min(self.rows, q.shape[0])
            coordinates = None if module.cross else token_coordinates(self.model, q.shape[2])
            self.attention[name] = attention_stats(
                q[:rows], k[:rows], mask, is_causal, module.scale, module.attn_softcap, coordinates
            )

        return probe

    def _residual_hook(self, name: str):
        @torch.no_grad()
        def hook(module: nn.Module, args, output: Tensor) -> None:
            self.residual_rms[name] = output.detach().float().square().mean().sqrt()

        return hook

    @torch.no_grad()
    def _output_hook(self, module: nn.Module, args, output) -> None:
        if isinstance(output, Tensor) and output.is_floating_point():
            logits = output.detach().float()
            self.output = {
                "logit_mean": logits.mean(),
                "logit_max": logits.amax(),
                "log_z": logits.logsumexp(-1).mean(),
            }
