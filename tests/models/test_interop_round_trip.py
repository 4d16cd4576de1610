"""Round trip: every parity case of the interop tests (`interop_cases`, a perturbed reference) -> suite ->
reference gives the reference's class with an equal state dict and logits within 1e-5."""

from __future__ import annotations

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")

from models.interop import from_reference, to_reference  # noqa: E402
from tests.models.interop_cases import (  # noqa: E402
    BERT_CASES,
    DECODER_CASES,
    SEQ2SEQ_CASES,
    T5_CASES,
    _ids,
    _max_diff,
    _perturb,
    seq2seq_reference,
)
from tests.models.interop_export_cases import TOL, _assert_same_outputs  # noqa: E402
from tests.models.interop_vit_cases import VIT_CASES  # noqa: E402

# ------------------------------------------------------------------------------------------------
# reference -> suite -> reference


def _reference(case: str) -> tuple[nn.Module, int]:
    """The perturbed reference model of a parity case of `interop_cases.py`, and its vocabulary."""
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
