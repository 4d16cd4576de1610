"""`models.interop.to_reference` refuses what no reference has: settings without an equivalent, each one named,
and modules no family exports; the registry of export targets."""

from __future__ import annotations

import pytest
from torch import nn

pytest.importorskip("transformers")
pytest.importorskip("timm")

from models import GPT, ArchConfig, BertMLM, EncoderDecoder, ViT  # noqa: E402
from models.interop import FAMILIES, TARGETS, to_reference  # noqa: E402
from tests.models.interop_export_cases import BART_BASE, BERT_BASE, GPT_BASE, MARIAN_BASE, VIT_BASE, VOCAB  # noqa: E402

# ------------------------------------------------------------------------------------------------
# settings without an equivalent


@pytest.mark.parametrize(
    "model, phrases",
    [
        (  # no GPT reference has sinusoidal positions: each is named, with what it has
            GPT(ArchConfig(**GPT_BASE, pos_encoding="sinusoidal")),
            [
                "pos_encoding='sinusoidal' has no equivalent in transformers GPT2LMHeadModel (it has 'learned')",
                "pos_encoding='sinusoidal' has no equivalent in transformers LlamaForCausalLM (it has 'rope')",
                "pos_encoding='sinusoidal' has no equivalent in transformers BloomForCausalLM (it has 'alibi')",
            ],
        ),
        (  # every mismatch of the closest reference comes first
            GPT(ArchConfig(**GPT_BASE, norm="rmsnorm", norm_placement="post")),
            [
                "cannot export: norm='rmsnorm' has no equivalent in transformers GPT2LMHeadModel (it has 'layernorm'); "
                "norm_placement='post' has no equivalent in transformers GPT2LMHeadModel (it has 'pre')",
            ],
        ),
        (
            GPT(ArchConfig(**GPT_BASE, pos_encoding="rope", norm="rmsnorm", activation="swiglu", rope_fraction=0.5)),
            ["rope_fraction=0.5 has no equivalent in transformers LlamaForCausalLM (it has 1.0)"],
        ),
        (  # a setting without weights would export silently: every reference refuses the newer axes unless it has one
            GPT(ArchConfig(**GPT_BASE, pos_encoding="rope", norm="rmsnorm", activation="swiglu", logit_softcap=30.0)),
            [
                "logit_softcap=30.0 has no equivalent in transformers LlamaForCausalLM (it has None)",
                "logit_softcap=30.0 has no equivalent in transformers Olmo2ForCausalLM (it has None)",
            ],
        ),
        (  # a learned embedding gain (DyT's recipe) has no reference weight
            GPT(ArchConfig(**GPT_BASE, learn_embed_scale=True)),
            ["learn_embed_scale=True has no equivalent in transformers GPT2LMHeadModel (it has None or False)"],
        ),
        (  # Peri-LN's embedding norm (the suite's default under peri) is not Gemma 2's sandwich, which scales instead
            GPT(
                ArchConfig(
                    **GPT_BASE,
                    pos_encoding="rope",
                    norm="rmsnorm",
                    norm_placement="peri",
                    activation="geglu",
                    gelu_approximate="tanh",
                    bias=False,
                    scale_embeddings=True,
                )
            ),  # fmt: skip
            ["peri_embedding_norm=True has no equivalent in transformers Gemma2ForCausalLM (it has False)"],
        ),
        (
            GPT(ArchConfig(**GPT_BASE, pos_encoding="alibi", gelu_approximate="tanh", embedding_norm=True, d_ff=100)),
            ["d_ff=100 has no equivalent in transformers BloomForCausalLM (it has None or 192)"],
        ),
        (  # the suite's translation default: sinusoidal positions, LayerNorm, biases, scaled scores, Pre-Norm;
            # Marian, the closest, first
            EncoderDecoder(ArchConfig(vocab_size=VOCAB, d_model=32, n_layers=1, n_heads=4, pos_encoding="sinusoidal")),
            [
                "cannot export: sinusoidal_layout='interleaved' has no equivalent in transformers MarianMTModel "
                "(it has 'halves'); norm_placement='pre' has no equivalent in transformers MarianMTModel "
                "(it has 'post')",
                "pos_encoding='sinusoidal' has no equivalent in transformers T5ForConditionalGeneration",
                "norm='layernorm' has no equivalent",
                "bias=True has no equivalent",
                "attn_scale=None has no equivalent in transformers T5ForConditionalGeneration (it has 1.0)",
                "pos_encoding='sinusoidal' has no equivalent in transformers BartForConditionalGeneration "
                "(it has 'learned')",
            ],
        ),
        (
            EncoderDecoder(ArchConfig(**dict(BART_BASE, learned_pos_offset=0, activation="swiglu"))),
            [
                "cannot export: learned_pos_offset=0 has no equivalent in transformers BartForConditionalGeneration "
                "(it has 2); activation='swiglu' has no equivalent in transformers BartForConditionalGeneration "
                "(it has 'relu' or 'gelu' or 'silu')",
            ],
        ),
        (
            EncoderDecoder(ArchConfig(**dict(MARIAN_BASE, max_seq_len=None))),
            ["cannot export: max_seq_len=None has no equivalent in transformers MarianMTModel"],
        ),
        (
            BertMLM(ArchConfig(**dict(BERT_BASE, norm_placement="pre", activation="relu"))),
            [
                "norm_placement='pre' has no equivalent in transformers BertForMaskedLM (it has 'post')",
                "activation='relu' has no equivalent in transformers BertForMaskedLM (it has 'gelu')",
            ],
        ),
        (
            ViT(ArchConfig(**dict(VIT_BASE, pos_encoding="sinusoidal", norm_eps=1e-5)), image_size=8, patch_size=2),
            [
                "pos_encoding='sinusoidal' has no equivalent in timm VisionTransformer (it has 'learned' or 'none')",
                "norm_eps=1e-05 has no equivalent in timm VisionTransformer (it has 1e-06)",
            ],
        ),
        (
            ViT(ArchConfig(**dict(VIT_BASE, pos_encoding="learned")), image_size=8, patch_size=2, learned_layout="2d"),
            ["learned_layout='2d' has no equivalent in timm VisionTransformer (it has one 1-D pos_embed"],
        ),
    ],
    ids=[
        "gpt-sinusoidal",
        "gpt-rmsnorm-post",
        "llama-partial-rope",
        "llama-logit-softcap",
        "gpt2-learned-embed-scale",
        "gemma2-peri-ln-embedding-norm",
        "bloom-d_ff",
        "t5-suite-default",
        "bart-offset-swiglu",
        "marian-no-max_seq_len",
        "bert-pre-relu",
        "vit-sincos-eps",
        "vit-learned-2d",
    ],
)
def test_no_equivalent_names_every_setting(model, phrases):
    with pytest.raises(ValueError) as info:
        to_reference(model)
    message = str(info.value)
    assert message.startswith("cannot export: ")
    for phrase in phrases:
        assert phrase in message


def test_a_module_no_reference_family_has_is_a_type_error():
    with pytest.raises(
        TypeError, match="cannot export Linear; exportable suite models: BertMLM, EncoderDecoder, GPT, ViT"
    ):
        to_reference(nn.Linear(4, 4))


def test_registry_exports_every_suite_model_to_each_family():
    """Each family module's target exports to the class it converts from, and every target's settings
    are `ArchConfig` fields."""
    assert [family.TARGET.library.split()[-1] for family in FAMILIES] == [family.REFERENCE for family in FAMILIES]
    assert TARGETS == tuple(family.TARGET for family in FAMILIES) and len(FAMILIES) == 11
    assert {target.suite for target in TARGETS} == {GPT, BertMLM, EncoderDecoder, ViT}
    assert all(set(target.settings) <= set(ArchConfig.__dataclass_fields__) for target in TARGETS)
