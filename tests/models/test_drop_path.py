"""Stochastic depth (`ArchConfig.drop_path`) on the shared residual branches of every family."""

import pytest
import torch
from torch import nn

from models import GPT, ArchConfig, BertMLM, EncoderDecoder, ViT
from models.block import Block, StackContext, drop_path_rates
from models.config import ConfigError

TINY = dict(vocab_size=64, d_model=32, n_layers=3, n_heads=4, max_seq_len=8, init_std=0.1)
FAMILIES = {
    "gpt": GPT,
    "bert": BertMLM,
    "encoder-decoder": EncoderDecoder,
    "vit": lambda cfg: ViT(cfg, image_size=8, patch_size=4),
}


def _rates(model: nn.Module) -> list[list[float]]:
    """Each stack's per-block drop probabilities (0 where the block has no DropPath)."""
    stacks = [m for m in model.modules() if hasattr(m, "blocks")]
    return [[getattr(b.drop_path, "drop_prob", 0.0) for b in stack.blocks] for stack in stacks]


def test_rates_rise_linearly_from_zero():
    assert drop_path_rates(0.2, 5) == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2])
    assert drop_path_rates(0.3, 1) == [0.0]  # one block: timm's linspace(0, rate, 1)
    assert drop_path_rates(0.0, 4) == [0.0] * 4


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_gets_stochastic_depth(family):
    model = FAMILIES[family](ArchConfig(**TINY, drop_path=0.2))
    rates = _rates(model)
    assert rates and all(r == pytest.approx([0.0, 0.1, 0.2]) for r in rates)
    plain = FAMILIES[family](ArchConfig(**TINY))
    assert all(isinstance(b.drop_path, nn.Identity) for s in plain.modules() if hasattr(s, "blocks") for b in s.blocks)
    assert plain.state_dict().keys() == model.state_dict().keys()  # no parameter: checkpoints load either way


def test_evaluation_is_unchanged():
    images = torch.randn(2, 3, 8, 8)
    torch.manual_seed(0)
    plain = ViT(ArchConfig(**TINY), image_size=8, patch_size=4).eval()
    dropped = ViT(ArchConfig(**TINY, drop_path=0.5), image_size=8, patch_size=4).eval()
    dropped.load_state_dict(plain.state_dict())
    torch.testing.assert_close(dropped(images), plain(images), atol=0, rtol=0)


def test_rate_zero_is_the_identity_in_training():
    """Off (rate 0), training mode computes exactly what evaluation does: no branch is ever dropped."""
    images = torch.randn(8, 3, 8, 8)
    torch.manual_seed(0)
    model = ViT(ArchConfig(**TINY, drop_path=0.0), image_size=8, patch_size=4)
    expected = model.eval()(images)
    model.train()
    for _ in range(3):
        torch.testing.assert_close(model(images), expected, atol=0, rtol=0)


def test_a_positive_rate_acts_in_training_only():
    images = torch.randn(8, 3, 8, 8)
    torch.manual_seed(0)
    model = ViT(ArchConfig(**TINY, drop_path=0.5), image_size=8, patch_size=4)
    expected = model.eval()(images)
    torch.testing.assert_close(model(images), expected, atol=0, rtol=0)  # evaluation: deterministic
    model.train()
    first, second = model(images), model(images)
    assert not torch.allclose(first, expected) and not torch.allclose(first, second)  # fresh draws each call


def test_a_branch_is_dropped_per_sample_in_training():
    cfg = ArchConfig(**TINY)
    torch.manual_seed(0)
    block = Block(cfg, drop_path=0.5).train()
    x = torch.randn(256, 4, 32)
    ctx = StackContext(mask=None, is_causal=False, rope=None, offset=0, memory=None, memory_mask=None, cache=None)
    y = block(x, ctx, 0)
    untouched = (y == x).flatten(1).all(1)  # both branches dropped: the sample passes through as it is
    assert 0.15 < untouched.float().mean() < 0.35  # 1/4 of the samples, and never a part of one
    assert not ((y == x).flatten(1).any(1) & ~untouched).any()
    block.eval()
    assert not (block(x, ctx, 0) == x).flatten(1).all(1).any()


@pytest.mark.parametrize("value", [-0.1, 1.0])
def test_the_rate_is_validated(value):
    with pytest.raises(ConfigError, match=rf"drop_path={value} must be in \[0, 1\)"):
        ArchConfig(drop_path=value)
