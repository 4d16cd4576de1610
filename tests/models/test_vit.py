"""ViT: positional schemes it supports, patch order (in)variance, pooling."""

from typing import get_args

import pytest
import torch

from models import ArchConfig, ViT
from models.config import POSITIONAL_FACTS, PosEncoding
from models.positional import LearnedPositions, PositionalScheme, sinusoidal_table
from models.vit import (
    LEARNED_LAYOUTS,
    VIT_POSITIONAL,
    Learned2DPositions,
    LearnedGridPositions,
    LearnedLayout,
    SinCos2DPositions,
)

TINY = dict(d_model=32, n_layers=2, n_heads=4, init_std=0.1)
IMAGES = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
PERM = torch.randperm(16, generator=torch.Generator().manual_seed(1))  # 4x4 grid of 4x4 patches


def _vit(pos: str, pool: str, learned_layout: str = "1d", **kw) -> ViT:
    torch.manual_seed(0)
    cfg = ArchConfig(**TINY, pos_encoding=pos, **kw)
    return ViT(cfg, image_size=16, patch_size=4, pool=pool, learned_layout=learned_layout).eval()


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
    assert type(learned.stack.pos) is LearnedGridPositions and isinstance(learned.stack.pos, LearnedPositions)
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


# learned 2-D positions (Dosovitskiy et al. App. D.4)


def test_learned_layouts_registry():
    assert set(LEARNED_LAYOUTS) == set(get_args(LearnedLayout))
    assert LEARNED_LAYOUTS["1d"] is VIT_POSITIONAL["learned"]


@pytest.mark.parametrize("pool", ["mean", "cls"])
def test_learned_2d_is_a_row_table_and_a_column_table(pool):
    model = _vit("learned", pool, learned_layout="2d")
    pos = model.stack.pos
    assert type(pos) is Learned2DPositions
    assert pos.rows.weight.shape == pos.cols.weight.shape == (4, 16)  # 2·4 rows of d/2, not 16 of d
    x = torch.zeros(1, model.num_tokens, 32)
    table, prefix = pos.embed(x)[0], int(pool == "cls")
    if prefix:
        assert not table[0].any()
    for r in range(4):
        for c in range(4):
            torch.testing.assert_close(table[prefix + 4 * r + c], torch.cat((pos.rows.weight[r], pos.cols.weight[c])))
    with torch.no_grad():
        assert not torch.allclose(model(_shuffle_patches(IMAGES, PERM)), model(IMAGES), atol=1e-4)
    # the tables are trained, and counted as lookup tables like the 1-D one
    model(IMAGES).sum().backward()
    assert pos.rows.weight.grad.abs().sum() > 0 and pos.cols.weight.grad.abs().sum() > 0
    assert model.num_parameters() - model.num_parameters(non_embedding=True) == 2 * 4 * 16


@pytest.mark.parametrize("pos", ["sinusoidal", "none"])
def test_learned_layout_needs_learned_positions(pos):
    with pytest.raises(ValueError, match=rf"learned_layout='2d'.*pos_encoding={pos!r}.*pos_encoding='learned'"):
        _vit(pos, "cls", learned_layout="2d")
    with pytest.raises(ValueError, match=r"learned_layout='3d' is not valid; choose one of '1d', '2d'"):
        _vit("learned", "cls", learned_layout="3d")


# other image sizes: position tables resampled over the new patch grid

BIG = torch.randn(2, 3, 24, 24, generator=torch.Generator().manual_seed(2))  # a 6x6 grid of 4x4 patches


FORMS = [("learned", "1d"), ("learned", "2d"), ("sinusoidal", "1d"), ("none", "1d")]


@pytest.mark.parametrize(("pos", "layout"), FORMS)
def test_every_scheme_runs_at_other_sizes(pos, layout):
    model = _vit(pos, "cls", learned_layout=layout)
    with torch.no_grad():
        for side in (8, 12, 16, 24, 32):
            assert model(torch.randn(2, 3, side, side)).shape == (2, 10)


def test_learned_1d_is_resampled_as_timm_does():
    from timm.layers import resample_abs_pos_embed

    model = _vit("learned", "cls")
    table = model.stack.pos.table.weight
    x = torch.zeros(1, 1 + 36, 32)
    expected = resample_abs_pos_embed(table[None], [6, 6], [4, 4], num_prefix_tokens=1)
    torch.testing.assert_close(model.stack.pos.embed(x), expected)
    torch.testing.assert_close(model.stack.pos.embed(x)[0, 0], table[0])  # the CLS row is kept
    # at the trained size the table is read as it is, not resampled
    torch.testing.assert_close(model.stack.pos.embed(torch.zeros(1, 17, 32))[0], table, atol=0, rtol=0)


@pytest.mark.parametrize("side", [12, 16])
def test_learned_1d_at_other_sizes_is_timms_dynamic_img_size(side):
    """A timm ViT's `pos_embed` is our 1-D table (one row per token, CLS first), and at 1.5x and 2x the
    trained 8x8 the converted model gives what timm's own `dynamic_img_size` model gives."""
    from timm.models.vision_transformer import VisionTransformer

    from models.interop import from_reference

    kw = dict(img_size=8, patch_size=2, in_chans=1, embed_dim=32, depth=2, num_heads=4, mlp_ratio=2.0, num_classes=10)
    torch.manual_seed(0)
    ref = VisionTransformer(**kw).eval()
    with torch.no_grad():
        ref.pos_embed.normal_()  # timm starts it at std 0.02, where positions would hardly count
    model = from_reference(ref)
    assert type(model.stack.pos) is LearnedGridPositions  # the learned 1-D form of a ViT
    assert model.stack.pos.table.weight.shape == ref.pos_embed.shape[1:] == (1 + 16, 32)
    dynamic = VisionTransformer(**kw, dynamic_img_size=True).eval()
    dynamic.load_state_dict(ref.state_dict())
    images = torch.randn(3, 1, side, side, generator=torch.Generator().manual_seed(side))
    with torch.no_grad():
        ours = model(images)
        torch.testing.assert_close(ours, dynamic(images), atol=1e-5, rtol=1e-5)
        model.stack.pos.table.weight.zero_()
        assert not torch.allclose(model(images), ours, atol=1e-3)  # the resampled positions count


def test_learned_2d_interpolates_each_axis():
    model = _vit("learned", "mean", learned_layout="2d")
    pos = model.stack.pos
    table = pos.embed(torch.zeros(1, 36, 32))[0]
    rows = torch.nn.functional.interpolate(pos.rows.weight.T[None], size=6, mode="linear", align_corners=False)[0].T
    torch.testing.assert_close(table[6 * 5 + 2], torch.cat((rows[5], table[2, 16:])))
    torch.testing.assert_close(table[:6, :16], rows[:1].expand(6, 16))  # the first grid row: one row vector


def test_sincos_at_another_grid_is_evaluated_at_the_trained_grids_coordinates():
    """A 4x4-grid model on a 6x6 grid: the sin-cos functions at the 6x6 patch centres in 4x4-grid units, so
    every patch keeps its place in the image (as MAE interpolates its fixed table), unlike the table of a
    model built for 6x6, whose integer positions run past the trained ones."""
    small = _vit("sinusoidal", "cls")
    x = torch.zeros(1, 37, 32)
    centres = torch.tensor([-1 / 6, 0.5, 7 / 6, 11 / 6, 2.5, 19 / 6])  # (i + 0.5) * 4/6 - 0.5
    axis = sinusoidal_table(6, 16, positions=centres)
    table = small.stack.pos.embed(x)[0]
    torch.testing.assert_close(table[1:].reshape(6, 6, 32)[2, 4], torch.cat((axis[2], axis[4])))
    assert table[0].abs().max() == 0  # CLS
    big = ViT(ArchConfig(**TINY, pos_encoding="sinusoidal"), image_size=24, patch_size=4)
    assert not torch.allclose(table, big.stack.pos.table)  # not the table of a model built for 6x6
    torch.testing.assert_close(big.stack.pos.table[1:7, :16], sinusoidal_table(6, 16)[:1].expand(6, 16))
    # integer positions give the rows of the plain table; the outermost 6x6 centres lie just past the 4x4 ones
    assert (sinusoidal_table(2, 16, positions=torch.tensor([1.0, 2.0])) == sinusoidal_table(4, 16)[1:3]).all()
    assert centres[0] < 0 < centres[1] and centres[4] < 3 < centres[5]


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "none"])
def test_positions_still_act_at_another_size(pos):
    """On a 6x6 grid the resampled (or recomputed) positions still tell patches apart; none stays a bag."""
    model = _vit(pos, "cls")
    perm = torch.randperm(36, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        same = torch.allclose(model(_shuffle_patches(BIG, perm)), model(BIG), atol=1e-5)
    assert same == (pos == "none")


def test_other_sizes_must_be_square_multiples_of_the_patch():
    model = _vit("learned", "cls")
    with pytest.raises(ValueError, match=r"images of 18x18.*patch_size=4"):
        model(torch.randn(1, 3, 18, 18))
    with pytest.raises(ValueError, match=r"images of 16x24.*square"):
        model(torch.randn(1, 3, 16, 24))
