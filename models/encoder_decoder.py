"""Encoder-decoder for translation, with greedy and beam-search decoding on the KV cache."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention import KVCache, softcap
from .base import TokenEmbedding, TransformerModel
from .block import TransformerStack
from .config import ArchConfig


class EncoderDecoder(TransformerModel):
    """Shared source/target embeddings, a bidirectional encoder of `cfg.encoder_layers` blocks, a
    cross-attending decoder of `cfg.decoder_layers` blocks."""

    head_modules = ("lm_head",)  # what a fine-tune may replace or train alone (models/peft.py)

    def __init__(self, cfg: ArchConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = TokenEmbedding(cfg)
        self.encoder = TransformerStack(cfg, causal=False, n_layers=cfg.encoder_layers)
        self.decoder = TransformerStack(cfg, causal=True, cross_attention=True, n_layers=cfg.decoder_layers)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.output_bias)
        self.init_weights()
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok.weight

    def encode(self, src_ids: Tensor, src_attention_mask: Tensor | None = None) -> Tensor:
        return self.encoder(self.tok(src_ids), attention_mask=src_attention_mask)

    def decode(self, tgt_ids: Tensor, memory: Tensor, src_attention_mask=None, cache: KVCache | None = None) -> Tensor:
        h = self.decoder(self.tok(tgt_ids), memory=memory, memory_mask=src_attention_mask, cache=cache)
        return softcap(self.lm_head(self.readout_input(h)), self.cfg.logit_softcap)

    def forward(self, src_ids: Tensor, tgt_ids: Tensor, src_attention_mask: Tensor | None = None) -> Tensor:
        """src_ids (B, S), tgt_ids (B, T) decoder inputs -> logits (B, T, vocab)."""
        return self.decode(tgt_ids, self.encode(src_ids, src_attention_mask), src_attention_mask)

    def _attention_layers(self) -> int:
        return self.cfg.encoder_layers + 2 * self.cfg.decoder_layers  # encoder self; decoder self and cross

    def _depth(self, name: str) -> int:
        return self.cfg.encoder_layers if name.startswith("encoder.") else self.cfg.decoder_layers

    @torch.no_grad()
    def greedy_decode(
        self, src_ids: Tensor, src_attention_mask: Tensor | None, bos_id: int, eos_id: int, max_len: int
    ) -> Tensor:
        """(B, ≤ max_len) generated ids after BOS; finished rows are padded with eos_id."""
        return self.beam_search(src_ids, src_attention_mask, bos_id, eos_id, max_len, beam_size=1)

    @torch.no_grad()
    def beam_search(
        self,
        src_ids: Tensor,
        src_attention_mask: Tensor | None,
        bos_id: int,
        eos_id: int,
        max_len: int,
        beam_size: int = 4,
        length_penalty: float = 1.0,
    ) -> Tensor:
        """Beam search scored by log-probability / length**length_penalty; beam_size 1 is greedy.
        Returns the best hypothesis per source, (B, L) without BOS, padded with eos_id."""
        B, K = src_ids.shape[0], beam_size
        memory = self.encode(src_ids, src_attention_mask).repeat_interleave(K, dim=0)
        mask = src_attention_mask.repeat_interleave(K, dim=0) if src_attention_mask is not None else None
        cache = self.decoder.new_cache(max_len + 1)
        tokens = torch.full((B * K, 1), bos_id, dtype=torch.long, device=src_ids.device)
        scores = torch.zeros(B, K, device=src_ids.device)
        scores[:, 1:] = float("-inf")  # all beams start identical: keep one alive
        finished = torch.zeros(B * K, dtype=torch.bool, device=src_ids.device)
        lengths = torch.zeros(B * K, device=src_ids.device)
        for _ in range(max_len):
            logp = self.decode(tokens[:, -1:], memory, mask, cache)[:, -1].log_softmax(-1)  # (B*K, V)
            V = logp.shape[-1]
            # a finished hypothesis only extends with EOS at no cost
            logp = torch.where(finished[:, None], torch.full_like(logp, float("-inf")), logp)
            logp[:, eos_id] = torch.where(finished, torch.zeros_like(finished, dtype=logp.dtype), logp[:, eos_id])
            total = (scores.view(-1, 1) + logp).view(B, K * V)
            new_lengths = (lengths + (~finished).float()).view(B, K, 1).expand(B, K, V).reshape(B, K * V)
            ranked = total / new_lengths.clamp(min=1) ** length_penalty
            top = ranked.topk(K, dim=-1).indices  # (B, K)
            beam = top // V + torch.arange(B, device=src_ids.device)[:, None] * K
            beam, token = beam.view(-1), (top % V).view(-1)
            scores = total.gather(1, top)
            lengths = new_lengths.gather(1, top).view(-1)
            finished = finished[beam] | (token == eos_id)
            tokens = torch.cat((tokens[beam], token[:, None]), dim=1)
            cache.reorder(beam)
            if finished.all():
                break
        best = (scores / lengths.view(B, K).clamp(min=1) ** length_penalty).argmax(-1)
        best = best + torch.arange(B, device=src_ids.device) * K
        return tokens[best, 1:]
