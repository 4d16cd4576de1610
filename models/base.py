"""What the four models share: token embeddings, initialisation, parameter and FLOP counts."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .config import ArchConfig


class TokenEmbedding(nn.Embedding):
    """Token lookup times `cfg.embed_scale` (sqrt(d_model) for sinusoidal, as in Vaswani et al.), or times a
    learned scalar `gain` in its place (`cfg.learns_embed_scale`: DyT's LLaMA recipe)."""

    def __init__(self, cfg: ArchConfig):
        super().__init__(cfg.vocab_size, cfg.d_model)
        self.scale = cfg.embed_scale  # the fixed factor; it also sets the table's init (init_weights)
        self.gain = nn.Parameter(torch.full((1,), cfg.d_model**0.5)) if cfg.learns_embed_scale else None

    def forward(self, ids: Tensor) -> Tensor:
        x = super().forward(ids)
        if self.gain is not None:
            return x * self.gain
        return x * self.scale if self.scale != 1.0 else x


class TransformerModel(nn.Module):
    """Base of the four models: init, parameter counts and forward FLOPs."""

    cfg: ArchConfig
    causal: bool = False

    def init_weights(self) -> None:
        """Normal(0, init_std) for matrices and embeddings, zero biases, unit norms; GPT-2's
        scaled init (std / sqrt(2·depth of its stack)) on the projections that write to the residual;
        Normal(0, 1/d_model) for token embeddings scaled by sqrt(d_model), fixed or learned."""
        std = self.cfg.init_std
        for name, module in self.named_modules():
            if isinstance(module, TokenEmbedding) and module.gain is not None:
                nn.init.constant_(module.gain, self.cfg.d_model**0.5)
            if isinstance(module, TokenEmbedding) and (module.scale != 1.0 or module.gain is not None):
                # A scaled lookup starts at N(0, 1/d) so that ×sqrt(d) gives unit variance: the amplitude of
                # the sinusoids it is added to (Vaswani et al. 2017 §3.4; fairseq and tensor2tensor init; with
                # 0.02 the positions would outweigh the tokens 3:1 at d=128), and what DyT's first norm needs,
                # having no statistics to rescale its input (see `ArchConfig.learn_embed_scale`).
                nn.init.normal_(module.weight, std=self.cfg.d_model**-0.5)
            elif isinstance(module, (nn.Linear, nn.Embedding)):
                scaled = self.cfg.scaled_residual_init and name.endswith((".out", ".down"))
                nn.init.normal_(module.weight, std=std / math.sqrt(2 * self._depth(name)) if scaled else std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def _embedding_parameters(self) -> set[int]:
        """Lookup tables: token embeddings, learned positions, relative-bias tables."""
        return {id(m.weight) for m in self.modules() if isinstance(m, nn.Embedding)}

    def num_parameters(self, non_embedding: bool = False) -> int:
        """Unique parameters (tied matrices once); `non_embedding` leaves out lookup tables."""
        skip = self._embedding_parameters() if non_embedding else set()
        return sum(p.numel() for p in self.parameters() if id(p) not in skip)

    def matmul_parameters(self) -> int:
        """Weights used in matmuls per token: every Linear's weight (incl. a tied output head)."""
        return sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Linear))

    def flops_per_token(self, seq_len: int, include_attention: bool = True) -> float:
        """Forward FLOPs per token: 2·N_matmul, plus 4·T·d per layer for QKᵀ and AV
        (halved for causal attention, which only sees the past). Training ≈ 3× this."""
        flops = 2.0 * self.matmul_parameters()
        if include_attention:
            attn = 4.0 * seq_len * self.cfg.n_heads * self.cfg.head_dim * self._attention_layers()
            flops += attn / 2 if self.causal else attn
        return flops

    def _attention_layers(self) -> int:
        return self.cfg.n_layers

    def _depth(self, name: str) -> int:
        """Blocks of the stack holding the module `name` (the scaled init's depth)."""
        return self.cfg.n_layers
