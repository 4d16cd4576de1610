"""ViT: positional schemes it supports, patch order (in)variance, pooling."""

from typing import get_args

import pytest
import torch

from models import ArchConfig, ViT
from models.config import POSITIONAL_FACTS, PosEncoding
from models.positional import LearnedPositions, PositionalScheme, sinusoidal_table
from models.vit import VIT_POSITIONAL, SinCos2DPositions

TINY = dict(d_model=32, n_layers=2, n_heads=4, init_std=0.1)
IMAGES = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
PERM = torch.randperm(16, generator=torch.Generator().manual_seed(1))  # 4x4 grid of 4x4 patches


def _vit(pos: str, pool: str, **kw) -> ViT:
    torch.manual_seed(0)
    return ViT(ArchConfig(**TINY, pos_encoding=pos, **kw), image_size=16, patch_size=4, pool=pool).eval()


def _shuffle_patches(images: torch.Tensor, perm: torch.Tensor, patch: int = 4) -> torch.Tensor:
    """Move the patch at raster index perm[i] to raster index i."""
    B, C, H, W = images.shape
    g = H // patch
    patches = images.reshape(B, C, g, patch, g, patch).permute(0, 2, 4, 1, 3, 5).reshape(B, g * g, C, patch, patch)
    patches = patches[:, perm]
    return patches.reshape(B, g, g, C, patch, patch).permute(0, 3, 1, 4, 2, 5).reshape(B, C, H, W)


def test_shuffle_moves_patch_tokens():
    model = _vit("none", "mean")
    shuffled = _shuffle_patches(IMAGES, PERM)
    assert not torch.equal(shuffled, IMAGES)
    assert torch.equal(_shuffle_patches(IMAGES, torch.arange(16)), IMAGES)
    tokens = model.patch(IMAGES).flatten(2).transpose(1, 2)
    torch.testing.assert_close(model.patch(shuffled).flatten(2).transpose(1, 2), tokens[:, PERM])


@pytest.mark.parametrize("pool", ["mean", "cls"])
def test_no_positions_is_permutation_invariant(pool):
    model = _vit("none", pool)
    with torch.no_grad():
        torch.testing.assert_close(model(_shuffle_patches(IMAGES, PERM)), model(IMAGES), atol=1e-5, rtol=0)


@pytest.mark.parametrize("pos", ["learned", "sinusoidal"])
@pytest.mark.parametrize("pool", ["mean", "cls"])
def test_positions_break_permutation_invariance(pos, pool):
    model = _vit(pos, pool)
    with torch.no_grad():
        assert not torch.allclose(model(_shuffle_patches(IMAGES, PERM)), model(IMAGES), atol=1e-4)


def test_vit_schemes_are_those_with_a_vit_form():
    assert set(VIT_POSITIONAL) == {name for name, facts in POSITIONAL_FACTS.items() if facts.vit_form}
    assert set(VIT_POSITIONAL) == {"learned", "sinusoidal", "none"}


@pytest.mark.parametrize("pos", get_args(PosEncoding))
def test_vit_builds_exactly_the_schemes_with_a_vit_form(pos):
    if not POSITIONAL_FACTS[pos].vit_form:
        with pytest.raises(ValueError, match=rf"pos_encoding={pos!r} is not supported by ViT"):
            _vit(pos, "cls")
        return
    model = _vit(pos, "cls")  # no max_seq_len: a learned table has one row per token
    assert model.stack.pos.facts is POSITIONAL_FACTS[pos]
    assert model.stack.pos.max_positions == (model.num_tokens if pos == "learned" else None)


@pytest.mark.parametrize("pos", ["rope", "alibi", "t5"])
def test_unsupported_positional_scheme(pos):
    with pytest.raises(ValueError) as err:
        ViT(ArchConfig(**TINY, pos_encoding=pos))
    msg = str(err.value)
    assert f"pos_encoding={pos!r}" in msg
    for choice in ("'learned'", "'sinusoidal'", "'none'"):
        assert choice in msg


def test_bad_geometry_and_pool():
    with pytest.raises(ValueError, match=r"image_size=16.*patch_size=5"):
        ViT(ArchConfig(**TINY), image_size=16, patch_size=5)
    with pytest.raises(ValueError, match=r"pool='max'.*'cls', 'mean'"):
        ViT(ArchConfig(**TINY), image_size=16, patch_size=4, pool="max")
    with pytest.raises(ValueError, match=r"d_model=34"):
        ViT(ArchConfig(**{**TINY, "d_model": 34, "n_heads": 2}, pos_encoding="sinusoidal"), image_size=16, patch_size=4)


@pytest.mark.parametrize("pool", ["mean", "cls"])
def test_positional_modules(pool):
    learned = _vit("learned", pool)
    assert type(learned.stack.pos) is LearnedPositions
    assert learned.stack.pos.table.num_embeddings == learned.num_tokens == 16 + (pool == "cls")
    assert type(_vit("none", pool).stack.pos) is PositionalScheme
    sincos = _vit("sinusoidal", pool)
    assert type(sincos.stack.pos) is SinCos2DPositions
    table, axis, prefix = sincos.stack.pos.table, sinusoidal_table(4, 16), int(pool == "cls")
    assert table.shape == (16 + prefix, 32)
    if prefix:
        assert not table[0].any()  # the CLS token has no position
    for r in range(4):
        for c in range(4):  # first half encodes the row, second half the column
            torch.testing.assert_close(table[prefix + 4 * r + c], torch.cat((axis[r], axis[c])))


@pytest.mark.parametrize("pool", ["mean", "cls"])
def test_pooling(pool):
    model = _vit("learned", pool)
    assert (model.cls is not None) == (pool == "cls")
    with torch.no_grad():
        x = model.patch(IMAGES).flatten(2).transpose(1, 2)
        if pool == "cls":
            torch.nn.init.normal_(model.cls)
            x = torch.cat((model.cls.expand(2, -1, -1), x), dim=1)
        h = model.stack(x)
        pooled = h[:, 0] if pool == "cls" else h.mean(1)
        torch.testing.assert_close(model(IMAGES), model.head(model.norm(pooled)))
        assert model(IMAGES).shape == (2, 10)


def test_flops_per_image():
    model = _vit("learned", "cls")
    assert model.flops_per_image() > model.flops_per_token(model.num_tokens) * model.num_tokens
