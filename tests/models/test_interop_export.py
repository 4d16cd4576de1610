"""`models.interop.to_reference`: suite models exported to transformers / timm, and round trips.

Round trip: every parity case of `test_interop` (a perturbed reference) -> suite -> reference gives
the reference's class with an equal state dict and logits within 1e-5. Export: suite models built
from suite configs (every parameter perturbed, so biases and norms are not at their init) -> their
reference, logits within 1e-5, saved and reloaded the library's own way. Settings no reference has
are refused with every one named.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")

from models import GPT, ArchConfig, BertMLM, EncoderDecoder, ViT  # noqa: E402
from models.interop import FAMILIES, TARGETS, from_reference, to_reference  # noqa: E402
from tests.models.test_interop import (  # noqa: E402
    BERT_CASES,
    DECODER_CASES,
    SEQ2SEQ_CASES,
    T5_CASES,
    VIT_CASES,
    _ids,
    _perturb,
    seq2seq_reference,
)

TOL = 1e-5
VOCAB = 61


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()


# ------------------------------------------------------------------------------------------------
# each family's inputs, and the reference's and the suite model's calls on them; BERT and T5 with right
# padding, compared at real positions (BERT) or with a padded source (T5)


def _padding(batch: int, length: int) -> torch.Tensor:
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, -4:] = 0
    mask[2, -(length // 2) :] = 0
    return mask


def _inputs(suite: nn.Module, vocab: int) -> list[dict[str, torch.Tensor]]:
    if isinstance(suite, ViT):
        side = math.isqrt(suite.num_tokens - (suite.pool == "cls")) * suite.patch.kernel_size[0]
        shape = (3, suite.patch.in_channels, side, side)
        return [dict(images=torch.randn(*shape, generator=torch.Generator().manual_seed(2)))]
    if isinstance(suite, BertMLM):
        return [dict(ids=_ids(vocab, 3, 19, seed=2), mask=_padding(3, 19))]
    if isinstance(suite, EncoderDecoder):
        src, tgt = _ids(vocab, 3, 24, seed=2), _ids(vocab, 3, 21, seed=3)
        return [dict(src=src, tgt=tgt, mask=None), dict(src=src, tgt=tgt, mask=_padding(3, 24))]
    return [dict(ids=_ids(vocab, 3, 17, seed=2))]


def _suite_output(suite: nn.Module, x: dict) -> torch.Tensor:
    if isinstance(suite, ViT):
        return suite(x["images"])
    if isinstance(suite, BertMLM):
        return suite(x["ids"], attention_mask=x["mask"])[x["mask"].bool()]
    if isinstance(suite, EncoderDecoder):
        return suite(x["src"], x["tgt"], src_attention_mask=x["mask"])
    return suite(x["ids"])


def _reference_output(ref: nn.Module, x: dict) -> torch.Tensor:
    if "images" in x:
        return ref(x["images"])
    if "src" in x:
        return ref(input_ids=x["src"], attention_mask=x["mask"], decoder_input_ids=x["tgt"]).logits
    if "mask" in x:
        return ref(x["ids"], attention_mask=x["mask"]).logits[x["mask"].bool()]
    return ref(x["ids"]).logits


def _assert_same_outputs(ref: nn.Module, suite: nn.Module, vocab: int, other: nn.Module | None = None) -> None:
    """`ref` computes `suite`'s outputs within TOL; so does the reference `other`, if given."""
    with torch.no_grad():
        for x in _inputs(suite, vocab):
            theirs = _reference_output(ref, x)
            assert _max_diff(theirs, _suite_output(suite, x)) < TOL
            if other is not None:
                assert _max_diff(theirs, _reference_output(other, x)) < TOL


# ------------------------------------------------------------------------------------------------
# reference -> suite -> reference


def _reference(case: str) -> tuple[nn.Module, int]:
    """The perturbed reference model of a `test_interop` parity case, and its vocabulary."""
    torch.manual_seed(0)
    if case in DECODER_CASES:
        config_cls, model_cls, kwargs, _ = DECODER_CASES[case]
        return _perturb(model_cls(config_cls(**kwargs)), seed=1), kwargs["vocab_size"]
    if case in BERT_CASES:
        config = transformers.BertConfig(max_position_embeddings=40, **BERT_CASES[case][0])
        ref = _perturb(transformers.BertForMaskedLM(config), seed=1)
        with torch.no_grad():  # the one table the suite has no place for (it has no token types): zero
            ref.bert.embeddings.token_type_embeddings.weight.zero_()
        return ref, config.vocab_size
    if case in T5_CASES:
        kwargs, _, separate_head = T5_CASES[case]
        config = transformers.T5Config(vocab_size=75, dropout_rate=0.0, **kwargs)
        ref = transformers.T5ForConditionalGeneration(config)
        if separate_head:
            ref.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        return _perturb(ref, seed=1), config.vocab_size
    if case in SEQ2SEQ_CASES:
        ref = seq2seq_reference(case)
        return ref, ref.config.vocab_size
    return _perturb(timm.models.vision_transformer.VisionTransformer(**VIT_CASES[case][0]), seed=1), 0


ROUND_TRIP_CASES = [
    c for c in (*DECODER_CASES, *BERT_CASES, *T5_CASES, *SEQ2SEQ_CASES, *VIT_CASES) if c != "t5-swiglu-separate-head"
]


@pytest.mark.parametrize("case", ROUND_TRIP_CASES)
def test_reference_suite_reference_round_trip(case):
    ref, vocab = _reference(case)
    suite = from_reference(ref)
    back = to_reference(suite)
    assert type(back) is type(ref) and not back.training
    theirs, ours = ref.state_dict(), back.state_dict()
    if case == "bert-untied-gelu_new":
        # untied, BERT's `predictions.bias` is a copy the forward never reads: exported, it is the bias used
        assert torch.equal(ours.pop("cls.predictions.bias"), theirs["cls.predictions.decoder.bias"])
        theirs.pop("cls.predictions.bias")
    assert theirs.keys() == ours.keys()
    if case.startswith("gemma2"):  # its norms store w for a scale of 1 + w: (w + 1) - 1 is w to float rounding
        for key in [k for k in theirs if "norm" in k]:
            torch.testing.assert_close(ours.pop(key), theirs.pop(key), rtol=0, atol=1e-7)
    assert [k for k in theirs if not torch.equal(theirs[k], ours[k])] == []
    _assert_same_outputs(ref, suite, vocab, other=back)


def test_bert_token_types_fold_into_positions_and_export_as_zero():
    """A BERT with a non-zero token-type table: the suite's positions hold type 0's row, and the export
    has BERT's positions with a zero type table, so every token type reads as the suite's type 0."""
    config = transformers.BertConfig(max_position_embeddings=40, **BERT_CASES["bert-tied-gelu"][0])
    ref = _perturb(transformers.BertForMaskedLM(config), seed=1)
    emb = ref.bert.embeddings
    back = to_reference(from_reference(ref))
    assert torch.allclose(
        back.bert.embeddings.position_embeddings.weight,
        emb.position_embeddings.weight + emb.token_type_embeddings.weight[0],
    )
    assert not back.bert.embeddings.token_type_embeddings.weight.any()
    ids = _ids(config.vocab_size, 2, 11, seed=4)
    with torch.no_grad():
        assert _max_diff(back(ids).logits, ref(ids).logits) < TOL  # token type 0: the same model


def test_t5_with_a_separate_head_has_no_transformers_5_equivalent():
    ref, _ = _reference("t5-swiglu-separate-head")
    with pytest.raises(ValueError, match="tie_embeddings=False has no equivalent in transformers T5"):
        to_reference(from_reference(ref))


# ------------------------------------------------------------------------------------------------
# suite -> reference, from suite configs

GPT_BASE = dict(vocab_size=VOCAB, d_model=48, n_layers=2, n_heads=4, max_seq_len=24)
ENC_DEC_BASE = dict(
    vocab_size=VOCAB,
    d_model=32,
    n_layers=2,
    n_heads=4,
    pos_encoding="t5",
    norm="rmsnorm",
    bias=False,
    attn_scale=1.0,
    t5_num_buckets=8,
    t5_max_distance=20,
)
BERT_BASE = dict(
    vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, max_seq_len=24, norm_placement="post", embedding_norm=True
)
VIT_BASE = dict(d_model=32, n_layers=2, n_heads=4, norm_eps=1e-6)
# the original Transformer as Marian has it, and BART's variant of it
MARIAN_BASE = dict(
    vocab_size=VOCAB,
    d_model=32,
    n_layers=2,
    n_heads=4,
    max_seq_len=40,
    pos_encoding="sinusoidal",
    sinusoidal_layout="halves",
    norm_placement="post",
)
BART_BASE = dict(MARIAN_BASE, pos_encoding="learned", learned_pos_offset=2, embedding_norm=True)

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
        dict(GPT_BASE, pos_encoding="rope", norm="rmsnorm", activation="swiglu", n_kv_heads=2, bias=False,
             qk_norm="rmsnorm", qk_norm_scope="head"),  # fmt: skip
        {},
        "Qwen3ForCausalLM",
    ),
    "olmo2-swiglu-reordered-qknorm": (
        GPT,
        dict(GPT_BASE, pos_encoding="rope", norm="rmsnorm", activation="swiglu", n_kv_heads=2, bias=False,
             norm_placement="reordered", qk_norm="rmsnorm", tie_embeddings=False),  # fmt: skip
        {},
        "Olmo2ForCausalLM",
    ),
    "gemma2-sandwich-softcap-scaled": (
        GPT,
        dict(GPT_BASE, pos_encoding="rope", norm="rmsnorm", norm_placement="peri", activation="geglu",
             gelu_approximate="tanh", n_kv_heads=2, bias=False, scale_embeddings=True, peri_embedding_norm=False,
             attn_scale=12**-0.5,
             attn_softcap=2.0, logit_softcap=3.0),  # fmt: skip
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
            GPT(ArchConfig(**GPT_BASE, pos_encoding="rope", norm="rmsnorm", norm_placement="peri", activation="geglu",
                           gelu_approximate="tanh", bias=False, scale_embeddings=True)),  # fmt: skip
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
