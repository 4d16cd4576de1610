"""Parity of `models.interop.from_reference` with the transformers encoder-decoders (T5, Marian, BART ->
EncoderDecoder), their refusals, and T5's relative-position buckets; the cases in `interop_cases`."""

from __future__ import annotations

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")

from models.interop import from_reference  # noqa: E402
from models.positional import sinusoidal_table, t5_relative_bucket  # noqa: E402
from tests.models.interop_cases import (  # noqa: E402
    SEQ2SEQ_CASES,
    T5_CASES,
    TOL,
    _ids,
    _max_diff,
    _perturb,
    seq2seq_reference,
)

# ------------------------------------------------------------------------------------------------
# T5 -> EncoderDecoder


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
