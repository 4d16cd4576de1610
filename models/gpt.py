"""GPT-style decoder-only language model."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention import KVCache, softcap
from .base import TokenEmbedding, TransformerModel
from .block import TransformerStack
from .config import ArchConfig


def sample_next(logits: Tensor, temperature: float, top_k: int | None, generator=None) -> Tensor:
    """(B, V) logits -> (B, 1) token ids; temperature 0 is greedy."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)


class GPT(TransformerModel):
    causal = True
    head_modules = ("lm_head",)  # what a fine-tune may replace or train alone (models/peft.py)

    def __init__(self, cfg: ArchConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = TokenEmbedding(cfg)
        self.stack = TransformerStack(cfg, causal=True)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.init_weights()
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok.weight

    def forward(self, input_ids: Tensor, cache: KVCache | None = None) -> Tensor:
        """input_ids (B, T) -> logits (B, T, vocab)."""
        h = self.stack(self.tok(input_ids), cache=cache)
        return softcap(self.lm_head(self.readout_input(h)), self.cfg.logit_softcap)

    @torch.no_grad()
    def generate(
        self,
        input_ids: Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Append `max_new_tokens` sampled tokens (greedy at temperature 0). With `use_cache`, the
        prompt is run once and each new token attends to cached keys and values."""
        cache = self.stack.new_cache(input_ids.shape[1] + max_new_tokens) if use_cache else None
        out, step = input_ids, input_ids
        for _ in range(max_new_tokens):
            logits = self(step if use_cache else out, cache=cache)[:, -1]
            token = sample_next(logits, temperature, top_k, generator)
            out = torch.cat((out, token), dim=1)
            step = token
        return out
