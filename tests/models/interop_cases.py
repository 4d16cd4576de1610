"""The reference models of the interop tests, shared by the parity tests (`test_interop_decoder_bert`,
`test_interop_seq2seq`, `test_interop_vit_registry`) and the round trips (`test_interop_round_trip`).

Reference models are built from tiny configs with random init (nothing is downloaded); every
parameter is then perturbed so that biases, norm weights and tables (zero or one at init) are
really transferred. Parity outputs must match within 1e-4 (max abs diff) in float32, both in eval mode.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")

TOL = 1e-4


def _perturb(ref: nn.Module, seed: int) -> nn.Module:
    """Random offsets on every trainable parameter (tied ones once), so nothing sits at its init value;
    a frozen one (Marian's sinusoidal tables) is a fixed function, not a weight."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in ref.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
    return ref.eval()


def _ids(vocab: int, batch: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()


# ------------------------------------------------------------------------------------------------
# decoders: GPT-2, Llama, BLOOM -> GPT

SMALL_GQA = dict(  # the Llama descendants' cases
    vocab_size=90, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2,
)  # fmt: skip
DECODER_CASES = {
    "gpt2-tied-gelu_new": (
        transformers.GPT2Config,
        transformers.GPT2LMHeadModel,
        dict(
            vocab_size=97,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=24,
            activation_function="gelu_new",
            bos_token_id=0,
            eos_token_id=0,
        ),
        True,
    ),
    "gpt2-untied-gelu-ninner-unscaled": (
        transformers.GPT2Config,
        transformers.GPT2LMHeadModel,
        dict(
            vocab_size=64,
            n_embd=48,
            n_layer=1,
            n_head=3,
            n_inner=80,
            n_positions=20,
            activation_function="gelu",
            scale_attn_weights=False,
            tie_word_embeddings=False,
            bos_token_id=0,
            eos_token_id=0,
        ),
        False,
    ),
    "llama-gqa-untied": (
        transformers.LlamaConfig,
        transformers.LlamaForCausalLM,
        dict(
            vocab_size=101,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            rope_theta=10000.0,
        ),
        False,
    ),
    "llama-mqa-tied-theta500-partial_factor": (
        transformers.LlamaConfig,
        transformers.LlamaForCausalLM,
        dict(
            vocab_size=64,
            hidden_size=64,
            intermediate_size=96,
            num_hidden_layers=2,
            num_attention_heads=8,
            num_key_value_heads=1,
            rope_theta=500.0,
            partial_rotary_factor=0.5,  # Llama's default RoPE ignores it: full-head rotation
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
        ),
        True,
    ),
    "llama-mha-attn_bias-geglu": (
        transformers.LlamaConfig,
        transformers.LlamaForCausalLM,
        dict(
            vocab_size=50,
            hidden_size=48,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=6,
            attention_bias=True,
            hidden_act="gelu_pytorch_tanh",
        ),
        False,
    ),
    "qwen3-gqa-qknorm_per_head": (
        transformers.Qwen3Config,
        transformers.Qwen3ForCausalLM,
        dict(SMALL_GQA, head_dim=8, tie_word_embeddings=False),  # Qwen 3's head_dim is its own field (128)
        False,
    ),
    "olmo2-gqa-reordered-qknorm": (
        transformers.Olmo2Config,
        transformers.Olmo2ForCausalLM,
        dict(SMALL_GQA, pad_token_id=0, bos_token_id=0, eos_token_id=0),
        False,
    ),
    "gemma2-gqa-sandwich-softcap": (  # a window that covers every position: full attention on every layer
        transformers.Gemma2Config,
        transformers.Gemma2ForCausalLM,
        dict(
            SMALL_GQA,
            head_dim=8,
            query_pre_attn_scalar=12,
            attn_logit_softcapping=3.0,
            final_logit_softcapping=2.0,
            max_position_embeddings=32,
            sliding_window=32,
            pad_token_id=0,
            bos_token_id=0,
            eos_token_id=0,
        ),
        True,
    ),
    "bloom-tied": (
        transformers.BloomConfig,
        transformers.BloomForCausalLM,
        dict(vocab_size=80, hidden_size=32, n_layer=2, n_head=4),
        True,
    ),
    "bloom-untied-6heads": (  # not a power of two: the interleaved extra ALiBi slopes
        transformers.BloomConfig,
        transformers.BloomForCausalLM,
        dict(vocab_size=70, hidden_size=48, n_layer=2, n_head=6, tie_word_embeddings=False),
        False,
    ),
}


# ------------------------------------------------------------------------------------------------
# BERT -> BertMLM

BERT_CASES = {
    "bert-tied-gelu": (
        dict(vocab_size=90, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64),
        True,
    ),
    "bert-untied-gelu_new": (
        dict(
            vocab_size=60,
            hidden_size=48,
            num_hidden_layers=2,
            num_attention_heads=6,
            intermediate_size=72,
            hidden_act="gelu_new",
            tie_word_embeddings=False,
        ),
        False,
    ),
}


# ------------------------------------------------------------------------------------------------
# T5 -> EncoderDecoder

T5_CASES = {
    # original T5: relu, head tied and the decoder output scaled by d_model**-0.5
    "t5-relu-scaled": (dict(d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=2), False, False),
    # v1.1: gated-gelu (tanh), tie_word_embeddings=False means "no scaling"; few buckets, short
    # max_distance so the 24-token source reaches the logarithmic and saturated buckets
    "t5-geglu-unscaled": (
        dict(
            d_model=48,
            d_kv=12,
            num_heads=4,
            d_ff=40,
            num_layers=2,
            feed_forward_proj="gated-gelu",
            tie_word_embeddings=False,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=20,
            initializer_factor=0.3,  # unscaled head on std-1 embeddings: keep the logits O(10)
        ),
        True,
        False,
    ),
    # a deep encoder and a shallow decoder (Kasai et al. 2021)
    "t5-relu-scaled-3-1": (
        dict(d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=3, num_decoder_layers=1),
        False,
        False,
    ),
    # gated-silu with a separate (untied) lm_head swapped into the reference
    "t5-swiglu-separate-head": (
        dict(
            d_model=32,
            d_kv=16,
            num_heads=2,
            d_ff=48,
            num_layers=1,
            feed_forward_proj="gated-silu",
            tie_word_embeddings=False,
            relative_attention_num_buckets=16,
            relative_attention_max_distance=32,
        ),
        False,
        True,
    ),
}


# ------------------------------------------------------------------------------------------------
# Marian, BART -> EncoderDecoder (Post-Norm; sinusoidal or learned positions)

SEQ2SEQ_BASE = dict(
    d_model=32,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=48,
    decoder_ffn_dim=48,
    max_position_embeddings=40,
    dropout=0.0,
)
# name: (config class, model class, config, whether final_logits_bias is non-zero)
SEQ2SEQ_CASES = {
    # opus-mt's settings: swish, embeddings scaled by sqrt(d), a logits bias; a deep encoder
    "marian-swish-scaled-logits_bias-3-1": (
        transformers.MarianConfig,
        transformers.MarianMTModel,
        dict(
            SEQ2SEQ_BASE,
            vocab_size=67,
            encoder_layers=3,
            decoder_layers=1,
            activation_function="swish",
            scale_embedding=True,
            pad_token_id=66,
            decoder_start_token_id=66,
        ),
        True,
    ),
    "marian-relu-unscaled-untied-odd_dim": (  # d = 42: the sines take one column more than the cosines
        transformers.MarianConfig,
        transformers.MarianMTModel,
        dict(
            SEQ2SEQ_BASE,
            vocab_size=58,
            d_model=42,
            encoder_attention_heads=6,
            decoder_attention_heads=6,
            encoder_layers=2,
            decoder_layers=2,
            activation_function="relu",
            tie_word_embeddings=False,
            pad_token_id=57,
            decoder_start_token_id=57,
        ),
        False,
    ),
    "bart-gelu-tied-logits_bias": (
        transformers.BartConfig,
        transformers.BartForConditionalGeneration,
        dict(SEQ2SEQ_BASE, vocab_size=71, encoder_layers=2, decoder_layers=2),
        True,
    ),
    "bart-gelu_new-scaled-untied-1-2": (
        transformers.BartConfig,
        transformers.BartForConditionalGeneration,
        dict(
            SEQ2SEQ_BASE,
            vocab_size=60,
            encoder_layers=1,
            decoder_layers=2,
            activation_function="gelu_new",
            scale_embedding=True,
            tie_word_embeddings=False,
        ),
        False,
    ),
}


def seq2seq_reference(case: str, **config) -> nn.Module:
    """The perturbed reference of a `SEQ2SEQ_CASES` case (its logits bias random where the case says)."""
    config_cls, model_cls, kwargs, logits_bias = SEQ2SEQ_CASES[case]
    torch.manual_seed(0)
    ref = _perturb(model_cls(config_cls(**(kwargs | config))), seed=1)
    with torch.no_grad():
        if logits_bias:  # a buffer, so not perturbed: what a trained Marian has
            ref.final_logits_bias.normal_(generator=torch.Generator().manual_seed(4))
        if not ref.config.tie_word_embeddings:  # transformers 5 then unties source and target: make them one
            for stack in (ref.model.encoder, ref.model.decoder):
                stack.embed_tokens.weight.copy_(ref.model.shared.weight)
    return ref
