"""Parity of `models.interop.from_reference` with transformers / timm reference models.

Reference models are built from tiny configs with random init (nothing is downloaded); every
parameter is then perturbed so that biases, norm weights and tables (zero or one at init) are
really transferred. Outputs must match within 1e-4 (max abs diff) in float32, both in eval mode.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")
timm_vit = pytest.importorskip("timm.models.vision_transformer")

from models.interop import CONVERTERS, from_reference, to_reference  # noqa: E402
from models.positional import sinusoidal_table, t5_relative_bucket  # noqa: E402

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
        dict(SMALL_GQA, head_dim=8, query_pre_attn_scalar=12, attn_logit_softcapping=3.0, final_logit_softcapping=2.0,
             max_position_embeddings=32, sliding_window=32, pad_token_id=0, bos_token_id=0, eos_token_id=0),
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


@pytest.mark.parametrize("case", list(DECODER_CASES))
def test_decoder_parity(case, max_diffs):
    config_cls, model_cls, kwargs, tied = DECODER_CASES[case]
    torch.manual_seed(0)
    ref = _perturb(model_cls(config_cls(attn_implementation="eager", **kwargs)), seed=1)
    model = from_reference(ref)
    assert not model.training and model.cfg.tie_embeddings == tied
    ids = _ids(kwargs["vocab_size"], batch=3, length=17, seed=2)
    with torch.no_grad():
        diff = _max_diff(model(ids), ref(ids).logits)
    max_diffs[case.split("-")[0]] = max(max_diffs.get(case.split("-")[0], 0.0), diff)
    assert diff < TOL


PADDED_CASES = ["qwen3-gqa-qknorm_per_head", "olmo2-gqa-reordered-qknorm", "gemma2-gqa-sandwich-softcap"]


@pytest.mark.parametrize("case", PADDED_CASES)
def test_decoder_parity_with_right_padding(case):
    """A right-padded batch: the reference masks the padding (`attention_mask`), the causal suite model needs no
    mask for the real tokens, which see no later position; their logits agree within 1e-4, and the suite model
    exported back to the reference computes them too."""
    config_cls, model_cls, kwargs, _ = DECODER_CASES[case]
    torch.manual_seed(0)
    ref = _perturb(model_cls(config_cls(attn_implementation="eager", **kwargs)), seed=1)
    model = from_reference(ref)
    ids = _ids(kwargs["vocab_size"], batch=3, length=17, seed=2)
    mask = torch.ones_like(ids)
    mask[1, 12:], mask[2, 5:] = 0, 0
    real = mask.bool()
    exported = to_reference(model).eval()
    with torch.no_grad():
        ours = model(ids)[real]
        assert _max_diff(ours, ref(ids, attention_mask=mask).logits[real]) < TOL
        assert _max_diff(ours, exported(ids, attention_mask=mask).logits[real]) < TOL


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


@pytest.mark.parametrize("case", list(BERT_CASES))
def test_bert_parity(case, max_diffs):
    kwargs, tied = BERT_CASES[case]
    torch.manual_seed(0)
    config = transformers.BertConfig(attn_implementation="eager", max_position_embeddings=40, **kwargs)
    ref = _perturb(transformers.BertForMaskedLM(config), seed=1)
    model = from_reference(ref)
    assert not model.training and model.cfg.tie_embeddings == tied
    ids = _ids(kwargs["vocab_size"], batch=3, length=19, seed=2)
    mask = torch.ones_like(ids)
    mask[1, -4:] = 0  # right padding
    mask[2, -11:] = 0
    with torch.no_grad():
        ours, theirs = model(ids, attention_mask=mask), ref(ids, attention_mask=mask).logits
    real = mask.bool()
    diff = _max_diff(ours[real], theirs[real])
    max_diffs["bert"] = max(max_diffs.get("bert", 0.0), diff)
    assert diff < TOL


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


@pytest.mark.parametrize("case", list(T5_CASES))
def test_t5_parity(case, max_diffs):
    kwargs, tied, separate_head = T5_CASES[case]
    vocab = 75
    torch.manual_seed(0)
    config = transformers.T5Config(attn_implementation="eager", vocab_size=vocab, dropout_rate=0.0, **kwargs)
    ref = transformers.T5ForConditionalGeneration(config)
    if separate_head:
        ref.lm_head = nn.Linear(config.d_model, vocab, bias=False)
    ref = _perturb(ref, seed=1)
    model = from_reference(ref)
    assert not model.training and model.cfg.tie_embeddings == tied
    src, tgt = _ids(vocab, 3, 24, seed=2), _ids(vocab, 3, 21, seed=3)
    src_mask = torch.ones_like(src)
    src_mask[1, -5:] = 0
    src_mask[2, -13:] = 0
    with torch.no_grad():
        diffs = [
            _max_diff(model(src, tgt), ref(input_ids=src, decoder_input_ids=tgt).logits),
            _max_diff(
                model(src, tgt, src_attention_mask=src_mask),
                ref(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt).logits,
            ),
        ]
    max_diffs["t5"] = max(max_diffs.get("t5", 0.0), *diffs)
    assert max(diffs) < TOL


def test_t5_depths_are_the_stacks():
    kwargs = T5_CASES["t5-relu-scaled-3-1"][0]
    model = from_reference(transformers.T5ForConditionalGeneration(transformers.T5Config(vocab_size=75, **kwargs)))
    assert (len(model.encoder.blocks), len(model.decoder.blocks)) == (3, 1)
    assert (model.cfg.encoder_layers, model.cfg.decoder_layers) == (3, 1)


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


def _target_padding(batch: int, length: int) -> torch.Tensor:
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, -3:] = 0
    mask[2, -9:] = 0
    return mask


@pytest.mark.parametrize("case", list(SEQ2SEQ_CASES))
def test_seq2seq_parity(case, max_diffs):
    """Logits within 1e-4 without padding, and with right padding in source and target (at the real
    target positions: the suite's causal decoder needs no target mask, its padded rows are not read)."""
    ref = seq2seq_reference(case, attn_implementation="eager")
    config = ref.config
    model = from_reference(ref)
    assert not model.training
    assert (len(model.encoder.blocks), len(model.decoder.blocks)) == (config.encoder_layers, config.decoder_layers)
    assert model.cfg.tie_embeddings == config.tie_word_embeddings
    assert model.cfg.output_bias == SEQ2SEQ_CASES[case][3]
    src, tgt = _ids(config.vocab_size, 3, 24, seed=2), _ids(config.vocab_size, 3, 21, seed=3)
    src_mask, tgt_mask = _target_padding(3, 24), _target_padding(3, 21)
    src_mask[2, -15:] = 0
    with torch.no_grad():
        plain = _max_diff(model(src, tgt), ref(input_ids=src, decoder_input_ids=tgt).logits)
        ours = model(src, tgt, src_attention_mask=src_mask)
        theirs = ref(
            input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt, decoder_attention_mask=tgt_mask
        ).logits
    padded = _max_diff(ours[tgt_mask.bool()], theirs[tgt_mask.bool()])
    family = case.split("-")[0]
    max_diffs[family] = max(max_diffs.get(family, 0.0), plain, padded)
    assert plain < TOL and padded < TOL


def test_marian_positions_are_the_halves_layout():
    """Marian's table is the suite's `halves` sinusoid (to float rounding), not its interleaved one."""
    ref = seq2seq_reference("marian-relu-unscaled-untied-odd_dim")
    table = ref.model.encoder.embed_positions.weight
    model = from_reference(ref)
    assert model.cfg.sinusoidal_layout == "halves" and model.cfg.pos_encoding == "sinusoidal"
    torch.testing.assert_close(model.encoder.pos.table, table, atol=1e-6, rtol=0)
    assert not torch.allclose(sinusoidal_table(table.shape[0], table.shape[1]), table, atol=1e-2)


def test_bart_positions_keep_the_offset_rows():
    ref = seq2seq_reference("bart-gelu-tied-logits_bias")
    model = from_reference(ref)
    assert model.cfg.learned_pos_offset == 2 and model.encoder.pos.max_positions == 40
    assert torch.equal(model.decoder.pos.table.weight, ref.model.decoder.embed_positions.weight)


@pytest.mark.parametrize(
    "case, change, message",
    [
        (
            "marian-relu-unscaled-untied-odd_dim",
            lambda ref: ref.model.encoder.embed_positions.weight.add_(0.01),
            "cannot convert: model.encoder.embed_positions.weight is not the sinusoidal table "
            "(sinusoidal_layout='halves'), which the suite computes",
        ),
        (
            "bart-gelu-tied-logits_bias",
            dict(decoder_attention_heads=2),
            "cannot convert: BART with encoder_attention_heads=4 and decoder_attention_heads=2 "
            "(the suite has one n_heads)",
        ),
        (
            "marian-swish-scaled-logits_bias-3-1",
            dict(decoder_ffn_dim=40),
            "cannot convert: Marian with encoder_ffn_dim=48 and decoder_ffn_dim=40 (the suite has one d_ff)",
        ),
        (
            "marian-swish-scaled-logits_bias-3-1",
            dict(share_encoder_decoder_embeddings=False),
            "cannot convert: Marian with separate source and target vocabularies",
        ),
        (
            "bart-gelu_new-scaled-untied-1-2",
            lambda ref: ref.model.decoder.embed_tokens.weight.mul_(2),
            "cannot convert: different tables in model.shared.weight, model.encoder.embed_tokens.weight and "
            "model.decoder.embed_tokens.weight (separate source and target embeddings)",
        ),
        (
            "bart-gelu-tied-logits_bias",
            dict(activation_function="tanh"),
            "cannot convert: activation 'tanh' has no suite equivalent",
        ),
    ],
    ids=[
        "marian-changed-table",
        "bart-heads",
        "marian-ffn",
        "marian-separate-vocab",
        "bart-untied-tables",
        "bart-tanh",
    ],
)
def test_seq2seq_mismatches_are_refused(case, change, message):
    if callable(change):
        ref = seq2seq_reference(case)
        with torch.no_grad():
            change(ref)
    else:
        ref = seq2seq_reference(case, **change)
    with pytest.raises(ValueError) as info:
        from_reference(ref)
    assert message in str(info.value)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 20), (16, 64), (64, 100), (10, 7)])
def test_t5_bucket_matches_transformers(bidirectional, num_buckets, max_distance):
    relative = torch.arange(-400, 401)[None, :].repeat(2, 1)
    ours = t5_relative_bucket(relative, bidirectional, num_buckets, max_distance)
    theirs = transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket(
        relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert torch.equal(ours, theirs)


# ------------------------------------------------------------------------------------------------
# timm VisionTransformer -> ViT

VIT_CASES = {
    "vit-cls-token": (
        dict(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=4, mlp_ratio=2.0, num_classes=7),
        "cls",
    ),
    "vit-avg-fc_norm-no_qkv_bias": (
        dict(
            img_size=12,
            patch_size=4,
            in_chans=1,
            embed_dim=48,
            depth=2,
            num_heads=3,
            mlp_ratio=1.5,
            num_classes=5,
            class_token=False,
            global_pool="avg",
            qkv_bias=False,
        ),
        "mean",
    ),
}


@pytest.mark.parametrize("case", list(VIT_CASES))
def test_vit_parity(case, max_diffs):
    kwargs, pool = VIT_CASES[case]
    torch.manual_seed(0)
    ref = _perturb(timm_vit.VisionTransformer(**kwargs), seed=1)
    model = from_reference(ref)
    assert not model.training and model.pool == pool
    images = torch.randn(3, kwargs.get("in_chans", 3), kwargs["img_size"], kwargs["img_size"])
    with torch.no_grad():
        diff = _max_diff(model(images), ref(images))
    max_diffs["vit"] = max(max_diffs.get("vit", 0.0), diff)
    assert diff < TOL


# ------------------------------------------------------------------------------------------------
# registry and refusals


def test_registry_covers_the_eleven_references():
    assert set(CONVERTERS) == {
        "GPT2LMHeadModel",
        "LlamaForCausalLM",
        "Qwen3ForCausalLM",
        "Olmo2ForCausalLM",
        "Gemma2ForCausalLM",
        "BloomForCausalLM",
        "BertForMaskedLM",
        "T5ForConditionalGeneration",
        "MarianMTModel",
        "BartForConditionalGeneration",
        "VisionTransformer",
    }


def test_one_module_per_reference_family():
    """models/interop/ holds a module per family (besides the shared `weight_table`, `targets` and
    `reference_config`), each registered under the reference class it converts."""
    import importlib
    import pkgutil

    import models.interop as interop

    shared = {"weight_table", "targets", "reference_config"}
    names = [m.name for m in pkgutil.iter_modules(interop.__path__) if m.name not in shared]
    families = [importlib.import_module(f"models.interop.{name}") for name in names]
    assert {family.REFERENCE: family.convert for family in families} == CONVERTERS


def test_unsupported_type_raises_type_error_listing_supported():
    with pytest.raises(TypeError, match="Linear.*supported.*GPT2LMHeadModel.*VisionTransformer"):
        from_reference(nn.Linear(4, 4))


def test_unsupported_features_raise_value_error():
    config = transformers.LlamaConfig(
        vocab_size=16,
        hidden_size=16,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
    )
    with pytest.raises(ValueError, match="RoPE scaling 'linear'"):
        from_reference(transformers.LlamaForCausalLM(config))
    vit = timm_vit.VisionTransformer(img_size=8, patch_size=4, embed_dim=16, depth=1, num_heads=2, global_pool="avg")
    with pytest.raises(ValueError, match="global_pool='avg' with class_token=True"):
        from_reference(vit)
    gemma = dict(SMALL_GQA, head_dim=8, max_position_embeddings=64, pad_token_id=0, bos_token_id=0, eos_token_id=0)
    with pytest.raises(ValueError, match=r"sliding-window attention \(a window of 16 < 64 positions\)"):
        from_reference(transformers.Gemma2ForCausalLM(transformers.Gemma2Config(**gemma, sliding_window=16)))
    with pytest.raises(ValueError, match="head_dim=16 != hidden_size/heads"):
        from_reference(transformers.Gemma2ForCausalLM(transformers.Gemma2Config(**gemma | {"head_dim": 16})))


# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def max_diffs(request):
    """Largest max-abs diff per family, printed at the end of the module (pytest -s)."""
    diffs: dict[str, float] = {}
    yield diffs
    print("\ninterop max abs diffs:", ", ".join(f"{k}={v:.2e}" for k, v in sorted(diffs.items())))
