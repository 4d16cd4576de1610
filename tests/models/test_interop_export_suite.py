"""Export: suite models built from suite configs (every parameter perturbed, so biases and norms are not at
their init) -> their transformers / timm reference, logits within 1e-5, saved and reloaded the library's own way."""

from __future__ import annotations

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")

from models import GPT, ArchConfig, BertMLM, EncoderDecoder, ViT  # noqa: E402
from models.interop import from_reference, to_reference  # noqa: E402
from tests.models.interop_cases import _perturb  # noqa: E402
from tests.models.interop_export_cases import (  # noqa: E402
    BART_BASE,
    BERT_BASE,
    ENC_DEC_BASE,
    GPT_BASE,
    MARIAN_BASE,
    VIT_BASE,
    VOCAB,
    _assert_same_outputs,
)

# ------------------------------------------------------------------------------------------------
# suite -> reference, from suite configs

SUITE_CASES = {
    # name: (suite class, config, ViT arguments, expected reference class)
    "gpt2-gelu-tied": (GPT, dict(GPT_BASE), {}, "GPT2LMHeadModel"),
    "gpt2-tanh-untied-dff": (
        GPT,
        dict(GPT_BASE, gelu_approximate="tanh", tie_embeddings=False, d_ff=80),
        {},
        "GPT2LMHeadModel",
    ),
    "gpt2-relu-nobias-unscaled": (
        GPT,
        dict(GPT_BASE, activation="relu", bias=False, attn_scale=1.0),
        {},
        "GPT2LMHeadModel",
    ),
    "llama-swiglu-gqa": (
        GPT,
        dict(GPT_BASE, pos_encoding="rope", norm="rmsnorm", activation="swiglu", n_kv_heads=2),
        {},
        "LlamaForCausalLM",
    ),
    "qwen3-swiglu-gqa-qknorm_per_head": (
        GPT,
        dict(
            GPT_BASE,
            pos_encoding="rope",
            norm="rmsnorm",
            activation="swiglu",
            n_kv_heads=2,
            bias=False,
            qk_norm="rmsnorm",
            qk_norm_scope="head",
        ),  # fmt: skip
        {},
        "Qwen3ForCausalLM",
    ),
    "olmo2-swiglu-reordered-qknorm": (
        GPT,
        dict(
            GPT_BASE,
            pos_encoding="rope",
            norm="rmsnorm",
            activation="swiglu",
            n_kv_heads=2,
            bias=False,
            norm_placement="reordered",
            qk_norm="rmsnorm",
            tie_embeddings=False,
        ),  # fmt: skip
        {},
        "Olmo2ForCausalLM",
    ),
    "gemma2-sandwich-softcap-scaled": (
        GPT,
        dict(
            GPT_BASE,
            pos_encoding="rope",
            norm="rmsnorm",
            norm_placement="peri",
            activation="geglu",
            gelu_approximate="tanh",
            n_kv_heads=2,
            bias=False,
            scale_embeddings=True,
            peri_embedding_norm=False,
            attn_scale=12**-0.5,
            attn_softcap=2.0,
            logit_softcap=3.0,
        ),  # fmt: skip
        {},
        "Gemma2ForCausalLM",
    ),
    "llama-geglu-mqa-base500-untied-nobias": (
        GPT,
        dict(
            GPT_BASE,
            pos_encoding="rope",
            norm="rmsnorm",
            activation="geglu",
            gelu_approximate="tanh",
            n_kv_heads=1,
            rope_base=500.0,
            tie_embeddings=False,
            bias=False,
            d_ff=64,
        ),
        {},
        "LlamaForCausalLM",
    ),
    "bloom-6heads": (
        GPT,
        dict(GPT_BASE, n_heads=6, pos_encoding="alibi", gelu_approximate="tanh", embedding_norm=True),
        {},
        "BloomForCausalLM",
    ),
    "bloom-untied-nobias": (
        GPT,
        dict(
            GPT_BASE,
            pos_encoding="alibi",
            gelu_approximate="tanh",
            embedding_norm=True,
            tie_embeddings=False,
            bias=False,
        ),
        {},
        "BloomForCausalLM",
    ),
    "bert-tied": (BertMLM, dict(BERT_BASE), {}, "BertForMaskedLM"),
    "bert-tanh-untied": (
        BertMLM,
        dict(BERT_BASE, gelu_approximate="tanh", tie_embeddings=False),
        {},
        "BertForMaskedLM",
    ),
    "t5-relu": (EncoderDecoder, dict(ENC_DEC_BASE, activation="relu"), {}, "T5ForConditionalGeneration"),
    "t5-gelu": (EncoderDecoder, dict(ENC_DEC_BASE, activation="gelu", d_ff=40), {}, "T5ForConditionalGeneration"),
    "t5-geglu-exact": (EncoderDecoder, dict(ENC_DEC_BASE, activation="geglu"), {}, "T5ForConditionalGeneration"),
    "t5-geglu-tanh": (
        EncoderDecoder,
        dict(ENC_DEC_BASE, activation="geglu", gelu_approximate="tanh"),
        {},
        "T5ForConditionalGeneration",
    ),
    "t5-swiglu": (EncoderDecoder, dict(ENC_DEC_BASE, activation="swiglu", d_ff=48), {}, "T5ForConditionalGeneration"),
    "t5-relu-3-1": (
        EncoderDecoder,
        dict(ENC_DEC_BASE, activation="relu", n_encoder_layers=3, n_decoder_layers=1),
        {},
        "T5ForConditionalGeneration",
    ),
    "marian-silu-3-1-output_bias": (
        EncoderDecoder,
        dict(MARIAN_BASE, activation="silu", n_encoder_layers=3, n_decoder_layers=1, output_bias=True),
        {},
        "MarianMTModel",
    ),
    "marian-relu-untied-unscaled-dff-nobias": (
        EncoderDecoder,
        dict(MARIAN_BASE, activation="relu", tie_embeddings=False, scale_embeddings=False, d_ff=40, bias=False),
        {},
        "MarianMTModel",
    ),
    "bart-gelu": (EncoderDecoder, dict(BART_BASE), {}, "BartForConditionalGeneration"),
    "bart-tanh-untied-scaled-1-2-output_bias": (
        EncoderDecoder,
        dict(
            BART_BASE,
            gelu_approximate="tanh",
            tie_embeddings=False,
            scale_embeddings=True,
            n_layers=1,
            n_decoder_layers=2,
            output_bias=True,
        ),
        {},
        "BartForConditionalGeneration",
    ),
    "vit-cls-learned": (
        ViT,
        dict(VIT_BASE),
        dict(image_size=8, patch_size=2, in_channels=3, num_classes=7, pool="cls"),
        "VisionTransformer",
    ),
    "vit-mean-nopos-tanh-nobias": (
        ViT,
        dict(VIT_BASE, pos_encoding="none", gelu_approximate="tanh", bias=False, d_ff=48),
        dict(image_size=12, patch_size=4, in_channels=1, num_classes=5, pool="mean"),
        "VisionTransformer",
    ),
}


def _suite(case: str) -> nn.Module:
    model_cls, config, vit_args, _ = SUITE_CASES[case]
    torch.manual_seed(0)
    return _perturb(model_cls(ArchConfig(**config), **vit_args), seed=1)


@pytest.mark.parametrize("case", list(SUITE_CASES))
def test_suite_model_exports_to_its_reference(case):
    suite = _suite(case)
    ref = to_reference(suite)
    assert type(ref).__name__ == SUITE_CASES[case][3] and not ref.training
    _assert_same_outputs(ref, suite, VOCAB)
    # and back: the same tensors; a suite model without biases comes back with zero ones
    again = from_reference(ref).state_dict()
    assert [k for k, v in suite.state_dict().items() if not torch.equal(v, again[k])] == []
    assert all(not again[k].any() for k in again.keys() - suite.state_dict().keys())


@pytest.mark.parametrize(
    "case",
    [
        "gpt2-tanh-untied-dff",
        "llama-swiglu-gqa",
        "bloom-6heads",
        "bert-tanh-untied",
        "t5-geglu-exact",
        "marian-silu-3-1-output_bias",
        "bart-tanh-untied-scaled-1-2-output_bias",
        "vit-mean-nopos-tanh-nobias",
    ],
)
def test_exported_model_reloads_in_its_library(case, tmp_path):
    """Saved the library's own way (`save_pretrained`; timm's safetensors + config.json) and loaded back
    by it, the model still computes the suite model's outputs (T5's unscaled head, timm's activation)."""
    suite = _suite(case)
    ref = to_reference(suite)
    if isinstance(suite, ViT):
        timm.models.save_for_hf(ref, tmp_path, safe_serialization=True)
        loaded = timm.create_model(f"local-dir:{tmp_path}", pretrained=True)
    else:
        ref.save_pretrained(tmp_path)
        loaded = getattr(transformers, type(ref).__name__).from_pretrained(tmp_path)
    _assert_same_outputs(loaded.eval(), suite, VOCAB)
