"""What the export tests share (`test_interop_round_trip`, `test_interop_export_suite`,
`test_interop_export_refusals`): each family's inputs and the reference's and the suite model's calls on
them, compared within 1e-5, and the suite configs the suite models are built from."""

from __future__ import annotations

import math

import torch
from torch import nn

from models import BertMLM, EncoderDecoder, ViT
from tests.models.interop_cases import _ids, _max_diff

TOL = 1e-5
VOCAB = 61

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
