"""BertMLM: right padding with attention_mask 0 leaves real-token outputs unchanged."""

from typing import get_args

import pytest
import torch

from models import ArchConfig, BertMLM
from models.config import PosEncoding

TINY = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=16, init_std=0.1)


def _bert(pos: str, **kw) -> BertMLM:
    torch.manual_seed(0)
    return BertMLM(ArchConfig(**TINY, pos_encoding=pos, **kw)).eval()


@pytest.mark.parametrize("pos", get_args(PosEncoding))
@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_padding_invariance(pos, n_kv_heads):
    model = _bert(pos, n_kv_heads=n_kv_heads)
    ids = torch.randint(1, 64, (2, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        base = model(ids)
        assert torch.equal(base, model(ids, attention_mask=torch.ones(2, 6, dtype=torch.long)))
        for extra in (1, 5):
            padded = torch.cat((ids, torch.full((2, extra), 7)), dim=1)  # pad id 7: any token
            mask = torch.cat((torch.ones(2, 6), torch.zeros(2, extra)), dim=1).long()
            out = model(padded, attention_mask=mask)
            assert out.shape == (2, 6 + extra, 64)
            torch.testing.assert_close(out[:, :6], base, atol=1e-5, rtol=0)
        # rows of different lengths in one batch: the shorter row equals its unpadded self
        mixed = ids.clone()
        mixed[1, 4:] = 3
        out = model(mixed, attention_mask=torch.tensor([[1] * 6, [1] * 4 + [0] * 2]))
        torch.testing.assert_close(out[1, :4], model(ids[1:, :4])[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(out[0], base[0], atol=1e-5, rtol=0)


def test_padding_without_mask_does_change_outputs():
    """The invariance above is due to the mask: unmasked padding is attended to."""
    model = _bert("rope")
    ids = torch.randint(1, 64, (1, 6), generator=torch.Generator().manual_seed(0))
    padded = torch.cat((ids, torch.full((1, 3), 7)), dim=1)
    with torch.no_grad():
        assert not torch.allclose(model(padded)[:, :6], model(ids), atol=1e-4)


def test_bidirectional():
    model = _bert("learned")
    ids = torch.randint(1, 64, (1, 6), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[0, -1] = (changed[0, -1] + 1) % 64
    with torch.no_grad():
        assert not torch.allclose(model(ids)[:, 0], model(changed)[:, 0], atol=1e-4)  # sees the future


def test_mlm_head_is_tied_with_its_own_bias():
    model = _bert("learned")
    assert model.lm_head.weight is model.tok.weight
    assert model.lm_head.bias is not None and model.lm_head.bias.shape == (64,)
