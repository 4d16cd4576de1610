"""Parity of `models.interop.from_reference` with the transformers decoders (GPT-2, Llama, Qwen 3, OLMo 2,
Gemma 2, BLOOM -> GPT) and BERT (-> BertMLM); the cases and their perturbed references in `interop_cases`."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from models.interop import from_reference, to_reference  # noqa: E402
from tests.models.interop_cases import BERT_CASES, DECODER_CASES, TOL, _ids, _max_diff, _perturb  # noqa: E402

# ------------------------------------------------------------------------------------------------
# decoders: GPT-2, Llama, BLOOM -> GPT


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
