"""Positional schemes against their papers' formulas."""

import math
from typing import get_args

import pytest
import torch

from models import GPT, ArchConfig
from models.config import POSITIONAL_FACTS, PosEncoding
from models.positional import (
    POSITIONAL,
    AlibiBias,
    RotaryPositions,
    SinusoidalPositions,
    T5RelativeBias,
    alibi_slopes,
    apply_rotary,
    build_positional,
    sinusoidal_table,
    t5_relative_bucket,
)

TINY = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=16)


# --- the interface: each scheme acts in exactly its own place -------------------------------------


@pytest.mark.parametrize("pos", get_args(PosEncoding))
def test_scheme_acts_only_where_it_should(pos):
    scheme = build_positional(ArchConfig(**TINY, pos_encoding=pos), causal=True)
    assert type(scheme) is POSITIONAL[pos]
    x = torch.randn(2, 5, 32)
    embedded = not torch.equal(scheme.embed(x), x)
    assert embedded == (pos in ("sinusoidal", "learned"))
    assert (scheme.rotary(5) is not None) == (pos == "rope")
    bias = scheme.score_bias(5, 5)
    assert (bias is not None) == (pos in ("alibi", "t5"))
    if bias is not None:
        assert bias.per_distance.shape == (4, 9) and bias.dense().shape == (4, 5, 5)


# --- the facts each scheme carries ---------------------------------------------------------------


def test_facts_table_matches_literal_and_registry():
    """One torch-free table of facts (config.py), carried by the registered class of each scheme."""
    assert set(POSITIONAL_FACTS) == set(get_args(PosEncoding)) == set(POSITIONAL)
    for name, scheme in POSITIONAL.items():
        assert scheme.facts is POSITIONAL_FACTS[name], name


@pytest.mark.parametrize("pos", get_args(PosEncoding))
def test_facts_describe_the_built_model(pos):
    cfg = ArchConfig(**TINY, pos_encoding=pos)
    model = GPT(cfg)
    scheme = model.stack.pos
    assert scheme.facts is cfg.positional
    assert (model.tok.scale == math.sqrt(32)) == scheme.facts.scales_embeddings
    # the longest position: a learned table's rows; every other scheme runs at any length
    assert scheme.max_positions == (16 if pos == "learned" else None)
    if scheme.max_positions is None:
        assert model(torch.zeros(1, 4 * 16, dtype=torch.long)).shape == (1, 64, 64)


@pytest.mark.parametrize("pos", ["sinusoidal", "rope", "alibi", "t5", "none"])
def test_unbounded_schemes_need_no_max_seq_len(pos):
    """For them max_seq_len only sizes a first cached table: unset, the model is the same."""
    ids = torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(0))
    logits = []
    for max_seq_len in (16, None):
        torch.manual_seed(0)
        model = GPT(ArchConfig(**{**TINY, "max_seq_len": max_seq_len}, pos_encoding=pos)).eval()
        logits.append(model(ids))
    torch.testing.assert_close(logits[0], logits[1], rtol=0, atol=0)


def test_learned_positions_need_max_seq_len():
    with pytest.raises(ValueError, match=r"pos_encoding='learned' needs max_seq_len"):
        GPT(ArchConfig(**{**TINY, "max_seq_len": None}, pos_encoding="learned"))


# --- sinusoidal ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [16, 6])
def test_sinusoidal_table_matches_formula(dim):
    table = sinusoidal_table(12, dim)
    expected = torch.zeros(12, dim, dtype=torch.float64)
    for p in range(12):
        for i in range(dim // 2):
            angle = p / 10000 ** (2 * i / dim)
            expected[p, 2 * i] = math.sin(angle)
            expected[p, 2 * i + 1] = math.cos(angle)
    torch.testing.assert_close(table.double(), expected, atol=1e-5, rtol=0)


def test_sinusoidal_embed_with_offset_and_beyond_max_seq_len():
    pos = SinusoidalPositions(ArchConfig(**TINY, pos_encoding="sinusoidal"), causal=True)
    x = torch.randn(1, 4, 32)
    torch.testing.assert_close(pos.embed(x, offset=3), x + sinusoidal_table(7, 32)[3:])
    # a fixed function: positions past max_seq_len (16) are computed, not an error
    torch.testing.assert_close(pos.embed(x, offset=20), x + sinusoidal_table(24, 32)[20:])


@pytest.mark.parametrize("pos", get_args(PosEncoding))
def test_embedding_scale(pos):
    ids = torch.tensor([[1, 5, 7]])
    for override, scaled in ((None, pos == "sinusoidal"), (True, True), (False, False)):
        model = GPT(ArchConfig(**TINY, pos_encoding=pos, scale_embeddings=override))
        expected = model.tok.weight[ids] * (math.sqrt(32) if scaled else 1.0)
        torch.testing.assert_close(model.tok(ids), expected)


# --- learned -------------------------------------------------------------------------------------


def test_learned_positions_reject_long_sequences():
    model = GPT(ArchConfig(**TINY, pos_encoding="learned"))
    model(torch.zeros(1, 16, dtype=torch.long))  # exactly max_seq_len is fine
    with pytest.raises(ValueError, match=r"17 positions.*max_seq_len=16.*pos_encoding='learned'"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match=r"max_seq_len=16"):
        model.generate(torch.zeros(1, 10, dtype=torch.long), max_new_tokens=8, temperature=0)


@pytest.mark.parametrize("pos", ["sinusoidal", "rope", "alibi", "t5", "none"])
def test_other_schemes_run_past_max_seq_len(pos):
    model = GPT(ArchConfig(**TINY, pos_encoding=pos))
    assert model(torch.zeros(1, 20, dtype=torch.long)).shape == (1, 20, 64)


# --- ALiBi ---------------------------------------------------------------------------------------

# Press et al.'s get_slopes: for a power of two n, the geometric sequence 2^(-8/n·i), i = 1..n;
# otherwise the slopes of the closest smaller power of two c, then every other slope of 2c.
ALIBI = {
    8: [2.0**-i for i in range(1, 9)],
    # c = 8: 1/2..1/256; 2c = 16 has slopes 2^(-i/2), every other one from the first: i = 1, 3, 5, 7
    12: [2.0**-i for i in range(1, 9)] + [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5],
    # c = 4: 2^-2, 2^-4, 2^-6, 2^-8; 2c = 8 has slopes 2^-i, every other one: i = 1, 3
    6: [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3],
    16: [2 ** (-i / 2) for i in range(1, 17)],
}


@pytest.mark.parametrize("n_heads", sorted(ALIBI))
def test_alibi_slopes_match_paper(n_heads):
    torch.testing.assert_close(alibi_slopes(n_heads).double(), torch.tensor(ALIBI[n_heads], dtype=torch.float64))


@pytest.mark.parametrize("causal", [True, False])
def test_alibi_bias(causal):
    cfg = ArchConfig(**TINY, pos_encoding="alibi")
    bias = AlibiBias(cfg, causal).score_bias(3, 7, offset=4).dense()  # queries at positions 4, 5, 6
    slopes = torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8])  # 4 heads: start 2^(-8/4)
    for h in range(4):
        for i in range(3):
            for j in range(7):
                expected = -slopes[h] * abs((4 + i) - j)
                if causal and j > 4 + i:
                    continue  # masked anyway
                assert bias[h, i, j].item() == pytest.approx(expected.item())


# --- RoPE ----------------------------------------------------------------------------------------


def _score(rope: RotaryPositions, q, k, m: int, n: int) -> float:
    cos, sin = rope.rotary(max(m, n) + 1)
    qm = apply_rotary(q, cos[m : m + 1], sin[m : m + 1])
    kn = apply_rotary(k, cos[n : n + 1], sin[n : n + 1])
    return (qm * kn).sum().item()


@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_rope_scores_depend_only_on_relative_position(fraction):
    cfg = ArchConfig(**{**TINY, "d_model": 64}, pos_encoding="rope", rope_fraction=fraction)  # head_dim 16
    rope = RotaryPositions(cfg, causal=True)
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 1, 16, dtype=torch.float64), torch.randn(1, 1, 1, 16, dtype=torch.float64)
    # float32 tables: equal to ~1e-6
    for m, n in [(0, 0), (3, 1), (1, 5), (7, 2)]:
        for s in (1, 4, 9, 30):  # 30: past max_seq_len, the table grows
            assert _score(rope, q, k, m + s, n + s) == pytest.approx(_score(rope, q, k, m, n), abs=1e-5)
    # and the score does change with the relative distance
    assert abs(_score(rope, q, k, 3, 1) - _score(rope, q, k, 3, 2)) > 1e-3


def _reference_rope(x: torch.Tensor, positions: torch.Tensor, rot: int, base: float) -> torch.Tensor:
    """Rotate-half RoPE as complex multiplication: (x_j + i·x_{j+rot/2})·e^(i·p·base^(-2j/rot))."""
    half = rot // 2
    theta = base ** (-torch.arange(half, dtype=torch.float64) * 2 / rot)
    z = torch.complex(x[..., :half], x[..., half:rot]) * torch.polar(
        torch.ones(len(positions), half, dtype=torch.float64), positions[:, None] * theta
    )
    return torch.cat((z.real, z.imag, x[..., rot:]), dim=-1)


@pytest.mark.parametrize("fraction, base", [(1.0, 10000.0), (0.5, 10000.0), (0.25, 500.0)])
def test_rope_matches_complex_reference(fraction, base):
    cfg = ArchConfig(**{**TINY, "d_model": 64}, pos_encoding="rope", rope_fraction=fraction, rope_base=base)
    rope = RotaryPositions(cfg, causal=True)
    x = torch.randn(2, 4, 6, 16, dtype=torch.float64)  # (B, H, T, head_dim)
    cos, sin = rope.rotary(6, offset=5)
    out = apply_rotary(x, cos.double(), sin.double())
    expected = _reference_rope(x, torch.arange(5, 11, dtype=torch.float64), cfg.rotary_dim, base)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    rot = cfg.rotary_dim
    assert torch.equal(out[..., rot:], x[..., rot:])  # pass-through dims untouched
    torch.testing.assert_close(out[..., :rot].norm(dim=-1), x[..., :rot].norm(dim=-1))  # a rotation


def test_rope_table_follows_module_dtype():
    model = GPT(ArchConfig(**TINY, pos_encoding="rope")).double()
    cos, _ = model.stack.pos.rotary(4)
    assert cos.dtype == torch.float64
    assert model(torch.zeros(1, 4, dtype=torch.long)).dtype == torch.float64


# --- T5 ------------------------------------------------------------------------------------------


def test_t5_buckets():
    rel = torch.tensor([0, -1, -7, -8, -16, -32, -64, -128, -1000, 1, 7, 8, 16, 128])
    # bidirectional, 32 buckets: 16 per direction, exact below 8, log-spaced up to 128
    bi = t5_relative_bucket(rel, True, 32, 128)
    assert bi.tolist() == [0, 1, 7, 8, 10, 12, 14, 15, 15, 17, 23, 24, 26, 31]
    # causal: only the past (negative memory - query) is bucketed; exact below 16, saturating at 31
    causal = t5_relative_bucket(rel, False, 32, 128)
    assert causal.tolist() == [0, 1, 7, 8, 16, 21, 26, 31, 31, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("causal", [False, True])
def test_t5_bias_is_a_learned_table_lookup(causal):
    cfg = ArchConfig(**TINY, pos_encoding="t5")
    t5 = T5RelativeBias(cfg, causal=causal)
    bias = t5.score_bias(4, 6, offset=2).dense()
    rel = torch.arange(6)[None, :] - torch.arange(2, 6)[:, None]
    buckets = t5_relative_bucket(rel, not causal, 32, 128)
    torch.testing.assert_close(bias, t5.bias.weight[buckets].permute(2, 0, 1))


def test_t5_decoders_bucket_causally():
    from models import BertMLM, EncoderDecoder

    cfg = ArchConfig(**TINY, pos_encoding="t5")
    model = EncoderDecoder(cfg)
    assert GPT(cfg).stack.pos.causal and model.decoder.pos.causal
    assert not BertMLM(cfg).stack.pos.causal and not model.encoder.pos.causal
