"""One block class for every model, and the stack that runs blocks under a positional scheme."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .attention import Attention, KVCache
from .base import scaled
from .config import ArchConfig, NormPlacement, register_name
from .ffn import FeedForward
from .norms import build_norm
from .plugin_checks import probe_function, variant_owner
from .positional import PositionalScheme, build_positional
from .relative_bias import ScoreMask

Sublayer = Callable[[Tensor], Tensor]
Branch = Callable[[Tensor], Tensor]  # dropout and stochastic depth on a sublayer's output

# norm_placement -> one residual step x -> x' from the sublayer f, its norm and (peri only) its output norm
PLACEMENTS: dict[NormPlacement, Callable[[Tensor, Sublayer, nn.Module, nn.Module | None, Branch], Tensor]] = {
    "pre": lambda x, f, norm, out_norm, branch: x + branch(f(norm(x))),
    "post": lambda x, f, norm, out_norm, branch: norm(x + branch(f(x))),
    "peri": lambda x, f, norm, out_norm, branch: x + branch(out_norm(f(norm(x)))),
    "reordered": lambda x, f, norm, out_norm, branch: x + branch(norm(f(x))),
}


def register_placement(name: str) -> Callable:
    """Decorator: registers a norm placement from outside the suite (a plugin, `models.plugins`): a residual step
    `(x, f, norm, out_norm, branch) -> x'` like `PLACEMENTS`' (`out_norm` is None: only `peri` builds a second
    norm; a placement adds its own final norm choice through `ArchConfig.final_norm`: every placement but
    `post` gets one); `name` is then a valid `model.arch.norm_placement`. It is run once with identity
    sublayers here: a wrong interface fails at registration."""

    def register(step: Callable) -> Callable:
        same = lambda h: h  # noqa: E731
        probe_function(f"norm_placement {name!r}", lambda x: step(x, same, same, None, same), (2, 3, 8))
        register_name("norm_placement", name, variant_owner(step))
        PLACEMENTS[name] = step
        return step

    return register


class Block(nn.Module):
    """Self-attention, optional cross-attention, FFN; each a residual branch with its own norm.

    Placement is data (`PLACEMENTS`): `pre` is x + f(norm(x)) (the stack adds a final norm), `post` the
    original norm(x + f(x)) of Vaswani et al., `peri` x + norm'(f(norm(x))) (Gemma 2's sandwich, Peri-LN:
    a second norm per sublayer, `*_out_norm`) and `reordered` OLMo 2's x + norm(f(x)). `drop_path` is this
    block's stochastic-depth rate: each branch's output is zeroed per sample with that probability in training;
    `residual_scale` multiplies each branch's output (CompleteP's 1/m_L).
    """

    def __init__(
        self, cfg: ArchConfig, cross_attention: bool = False, drop_path: float = 0.0, residual_scale: float = 1.0
    ):
        super().__init__()
        self.placement = cfg.norm_placement
        peri = cfg.norm_placement == "peri"
        self.attn, self.attn_norm = Attention(cfg), build_norm(cfg, attention=True)
        self.attn_out_norm = build_norm(cfg, attention=True) if peri else None
        self.cross = Attention(cfg, cross=True) if cross_attention else None
        self.cross_norm = build_norm(cfg, attention=True) if cross_attention else None
        self.cross_out_norm = build_norm(cfg, attention=True) if cross_attention and peri else None
        self.ffn, self.ffn_norm = FeedForward(cfg), build_norm(cfg)
        self.ffn_out_norm = build_norm(cfg) if peri else None
        self.drop = nn.Dropout(cfg.dropout)
        self.drop_path = _drop_path(drop_path)
        self.residual_scale = residual_scale  # CompleteP's 1/m_L (models.parametrization); 1 otherwise

    def _branch(self, h: Tensor) -> Tensor:
        return scaled(self.drop_path(self.drop(h)), self.residual_scale)

    def forward(self, x: Tensor, ctx: StackContext, layer: int) -> Tensor:
        residual = PLACEMENTS[self.placement]
        x = residual(x, lambda h: self.attn(h, **ctx.self_kwargs(layer)), self.attn_norm, self.attn_out_norm,
                     self._branch)  # fmt: skip
        if self.cross is not None:
            x = residual(x, lambda h: self.cross(h, **ctx.cross_kwargs(layer)), self.cross_norm, self.cross_out_norm,
                         self._branch)  # fmt: skip
        return residual(x, self.ffn, self.ffn_norm, self.ffn_out_norm, self._branch)


def _drop_path(rate: float) -> nn.Module:
    if rate == 0.0:  # no module, no random draw: a model without stochastic depth is as before
        return nn.Identity()
    from timm.layers import DropPath  # imported on use: `import timm` takes seconds

    return DropPath(rate)


def drop_path_rates(rate: float, depth: int) -> list[float]:
    """Stochastic depth rising linearly over a stack, 0 at the first block and `rate` at the last
    (Huang et al. 2016; timm's `torch.linspace(0, drop_path_rate, depth)`)."""
    return [rate * i / max(1, depth - 1) for i in range(depth)]


class StackContext:
    """What every layer of one forward shares: masks, rotary tables, memory and caches."""

    def __init__(self, *, mask, is_causal, rope, offset, memory, memory_mask, cache, rope_layers=None):
        self.mask, self.is_causal, self.rope, self.offset = mask, is_causal, rope, offset
        self.memory, self.memory_mask, self.cache = memory, memory_mask, cache
        self.rope_layers = rope_layers  # the layers that rotate (`ArchConfig.rope_layers`); None: every layer

    def self_kwargs(self, layer: int) -> dict:
        cache = self.cache.self_attn[layer] if self.cache is not None else None
        rope = self.rope if self.rope_layers is None or layer in self.rope_layers else None  # the others: NoPE
        return dict(mask=self.mask, is_causal=self.is_causal, rope=rope, cache=cache, offset=self.offset)

    def cross_kwargs(self, layer: int) -> dict:
        cache = self.cache.cross_attn[layer] if self.cache is not None else None
        return dict(mask=self.memory_mask, memory=self.memory, cache=cache)


def padding_bias(attention_mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """(B, S) with 1 = token, 0 = padding -> additive (B, 1, 1, S) bias."""
    if attention_mask is None:
        return None
    bias = torch.zeros(attention_mask.shape, dtype=dtype, device=attention_mask.device)
    return bias.masked_fill(attention_mask == 0, float("-inf"))[:, None, None, :]


class TransformerStack(nn.Module):
    """Encoder (bidirectional), decoder (causal) or cross-attending decoder over embedded inputs.

    Args:
        cfg: architecture.
        causal: causal self-attention.
        cross_attention: blocks also attend to an encoder's output.
        positional: a scheme to use instead of the one `cfg.pos_encoding` names (ViT's 2-D tables).
        final_norm: end with a norm under pre-norm placement (ViT applies its own after pooling).
        n_layers: blocks; `None` means `cfg.n_layers` (the encoder-decoder passes each stack's depth).

    With `cfg.activation_checkpointing`, a training forward keeps only each block's input and
    recomputes the block in the backward pass.
    """

    def __init__(
        self,
        cfg: ArchConfig,
        causal: bool,
        cross_attention: bool = False,
        positional: PositionalScheme | None = None,
        final_norm: bool = True,
        n_layers: int | None = None,
    ):
        super().__init__()
        self.causal = causal
        self.pos = positional if positional is not None else build_positional(cfg, causal)
        self.embed_norm = build_norm(cfg) if cfg.normalizes_embeddings else nn.Identity()
        self.drop = nn.Dropout(cfg.dropout)
        depth = n_layers or cfg.n_layers
        residual_scale = cfg.scheme.residual(cfg.width_mult, cfg.depth_mult(depth))
        self.blocks = nn.ModuleList(
            Block(cfg, cross_attention, rate, residual_scale) for rate in drop_path_rates(cfg.drop_path, depth)
        )
        self.activation_checkpointing = cfg.activation_checkpointing
        self.rope_layers = frozenset(cfg.rope_layers) if cfg.rope_layers is not None else None
        self.final_norm = build_norm(cfg) if final_norm and cfg.final_norm else nn.Identity()

    def new_cache(self, max_len: int) -> KVCache:
        return KVCache(len(self.blocks), max_len)

    def self_mask(
        self, T: int, offset: int, attention_mask: Tensor | None, x: Tensor
    ) -> tuple[Tensor | ScoreMask | None, bool]:
        """The self-attention mask of one forward, as (mask, is_causal). With no bias and no padding,
        SDPA's causal flag is used and no T×T mask is built, so the fused kernels run. A scheme's score
        bias stays per distance in a `ScoreMask` with the padding and causality, which attention applies
        block by block (`models.relative_bias`); otherwise the mask hides the future itself.

        Args:
            T: new positions (the queries).
            offset: positions already in the KV cache.
            attention_mask: (B, T) with 1 = token, 0 = padding, or None.
            x: the embedded input (B, T, d), whose dtype and device the mask takes.
        """
        bias = self.pos.score_bias(T, offset + T, offset)
        pad = padding_bias(attention_mask, x.dtype)
        causal_rows = self.causal and T > 1
        if bias is not None:
            return ScoreMask(bias, pad, offset if causal_rows else None), causal_rows
        if pad is None and (offset == 0 or not causal_rows):
            return None, causal_rows
        if not causal_rows:
            return pad, causal_rows
        visible = torch.ones(T, offset + T, dtype=torch.bool, device=x.device).tril(offset)
        return (visible if pad is None else pad.masked_fill(~visible, float("-inf"))), causal_rows

    def forward(
        self,
        x: Tensor,
        attention_mask: Tensor | None = None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """x: (B, T, d) embedded inputs; attention_mask: (B, T) 1 = token; memory: (B, S, d)
        encoder output for cross-attention with memory_mask (B, S); cache: decoding state."""
        T = x.shape[1]
        offset = cache.length if cache is not None else 0
        x = self.drop(self.embed_norm(self.pos.embed(x, offset)))
        mask, is_causal = self.self_mask(T, offset, attention_mask, x)
        ctx = StackContext(
            mask=mask,
            is_causal=is_causal,
            rope=self.pos.rotary(T, offset),
            offset=offset,
            memory=memory,
            memory_mask=padding_bias(memory_mask, x.dtype),
            cache=cache,
            rope_layers=self.rope_layers,
        )
        # only where a backward will follow: evaluation keeps no activations anyway, and a KV cache
        # written during the forward would be written again by the recomputation
        recompute = self.activation_checkpointing and self.training and cache is None and torch.is_grad_enabled()
        for layer, block in enumerate(self.blocks):
            if recompute:
                # non-reentrant: gradients reach the parameters and the shared inputs (memory, T5's
                # bias table) whatever requires grad; the RNG state is stashed, so dropout and
                # DropPath replay the same draws
                x = checkpoint(block, x, ctx, layer, use_reentrant=False)
            else:
                x = block(x, ctx, layer)
        if cache is not None:
            cache.length += T
        return self.final_norm(x)
