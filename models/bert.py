"""BERT-style bidirectional encoder with a masked-LM head."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .attention import softcap
from .base import TokenEmbedding, TransformerModel
from .block import TransformerStack
from .config import ArchConfig
from .norms import build_norm


class BertMLM(TransformerModel):
    """Encoder + BERT's MLM head (dense, GELU, norm, then the tied decoder with its own bias)."""

    head_modules = ("head_dense", "head_norm", "lm_head")  # what a fine-tune may replace or train alone

    def __init__(self, cfg: ArchConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = TokenEmbedding(cfg)
        self.stack = TransformerStack(cfg, causal=False)
        self.head_dense = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.head_norm = build_norm(cfg)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=True)
        self.init_weights()
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok.weight

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """input_ids (B, T), attention_mask (B, T) with 1 = token, 0 = padding -> logits (B, T, V)."""
        h = self.stack(self.tok(input_ids), attention_mask=attention_mask)
        h = self.head_norm(F.gelu(self.head_dense(h), approximate=self.cfg.gelu_approximate))
        return softcap(self.lm_head(self.readout_input(h)), self.cfg.logit_softcap)
