"""ArchConfig: Literal axes in step with their registries, validation messages, sizes and counts."""

import math
from fractions import Fraction
from typing import get_args

import pytest
import torch

from models import GPT, ArchConfig, BertMLM, EncoderDecoder, ViT, default_d_ff
from models.config import Activation, GeluApproximation, NormName, NormPlacement, PosEncoding, SinusoidalLayout
from models.ffn import _activations
from models.norms import NORMS
from models.positional import POSITIONAL, SINUSOIDAL_LAYOUTS

TINY = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=16)


# --- registries vs Literals ---------------------------------------------------------------------


def test_positional_registry_matches_literal():
    assert set(POSITIONAL) == set(get_args(PosEncoding))


def test_sinusoidal_layout_registry_matches_literal():
    assert set(SINUSOIDAL_LAYOUTS) == set(get_args(SinusoidalLayout))


def test_norm_registry_matches_literal():
    assert set(NORMS) == set(get_args(NormName))


@pytest.mark.parametrize("approx", get_args(GeluApproximation))
def test_activation_registry_matches_literal(approx):
    assert set(_activations(ArchConfig(**TINY, gelu_approximate=approx))) == set(get_args(Activation))


# --- validation: ValueError naming field, value and choices --------------------------------------


@pytest.mark.parametrize(
    "field, literal",
    [
        ("pos_encoding", PosEncoding),
        ("norm", NormName),
        ("norm_placement", NormPlacement),
        ("activation", Activation),
        ("gelu_approximate", GeluApproximation),
        ("sinusoidal_layout", SinusoidalLayout),
    ],
)
def test_invalid_literal_lists_choices(field, literal):
    with pytest.raises(ValueError) as err:
        ArchConfig(**{**TINY, field: "batchnorm"})
    msg = str(err.value)
    assert f"{field}='batchnorm'" in msg
    for choice in get_args(literal):
        assert repr(choice) in msg


def test_d_model_not_divisible_by_n_heads():
    with pytest.raises(ValueError, match=r"d_model=30.*n_heads=4"):
        ArchConfig(**{**TINY, "d_model": 30})


def test_n_heads_not_divisible_by_n_kv_heads():
    with pytest.raises(ValueError, match=r"n_heads=4.*n_kv_heads=3"):
        ArchConfig(**TINY, n_kv_heads=3)


def test_rope_with_odd_rotary_dim():
    # head_dim 12/4 = 3: odd
    with pytest.raises(ValueError, match=r"pos_encoding='rope'.*rotary dim.*=3"):
        ArchConfig(**{**TINY, "d_model": 12}, pos_encoding="rope")
    # head_dim 8 * 0.25 = 2 is even, 8 * 0.375 = 3 is odd
    ArchConfig(**TINY, pos_encoding="rope", rope_fraction=0.25)
    with pytest.raises(ValueError, match=r"pos_encoding='rope'.*=3"):
        ArchConfig(**TINY, pos_encoding="rope", rope_fraction=0.375)
    # an odd head_dim is fine for schemes that do not rotate
    ArchConfig(**{**TINY, "d_model": 12}, pos_encoding="alibi")


@pytest.mark.parametrize("num_buckets, max_distance", [(32, 16), (32, 8), (2, 64)])
def test_t5_buckets_need_room_for_their_log_range(num_buckets, max_distance):
    with pytest.raises(ValueError, match=rf"t5_num_buckets={num_buckets}, t5_max_distance={max_distance}.*> t5_num"):
        ArchConfig(**TINY, pos_encoding="t5", t5_num_buckets=num_buckets, t5_max_distance=max_distance)
    ArchConfig(**TINY, pos_encoding="rope", t5_num_buckets=num_buckets, t5_max_distance=max_distance)  # unused


def test_smallest_valid_t5_buckets_index_every_bucket():
    """Just above the bound, every distance lands in a real bucket, saturating at the last."""
    from models.positional import t5_relative_bucket

    cfg = ArchConfig(**TINY, pos_encoding="t5", t5_num_buckets=16, t5_max_distance=9)
    for bidirectional, span in ((False, -torch.arange(40)), (True, torch.arange(-40, 41))):
        buckets = t5_relative_bucket(span, bidirectional, cfg.t5_num_buckets, cfg.t5_max_distance)
        assert buckets.min() == 0 and buckets.max() == cfg.t5_num_buckets - 1


@pytest.mark.parametrize(
    "field, value",
    [
        ("rope_fraction", 0.0),
        ("rope_fraction", 1.5),
        ("dropout", 1.0),
        ("n_layers", 0),
        ("max_seq_len", 0),
        ("n_encoder_layers", 0),
        ("n_decoder_layers", -1),
        ("learned_pos_offset", -2),
    ],
)
def test_out_of_range_values(field, value):
    with pytest.raises(ValueError, match=rf"{field}={value}"):
        ArchConfig(**{**TINY, field: value})


def test_stack_depths_default_to_n_layers():
    assert (ArchConfig(n_layers=6).encoder_layers, ArchConfig(n_layers=6).decoder_layers) == (6, 6)
    split = ArchConfig(n_layers=6, n_encoder_layers=10, n_decoder_layers=2)
    assert (split.encoder_layers, split.decoder_layers) == (10, 2)
    assert ArchConfig(n_layers=6, n_decoder_layers=1).encoder_layers == 6


def test_max_seq_len_is_unset_by_default():
    """`None`: a task module takes it from the data; a model built directly needs it only for `learned`."""
    assert ArchConfig().max_seq_len is None
    assert ArchConfig(max_seq_len=64).max_seq_len == 64


def test_config_is_frozen():
    cfg = ArchConfig(**TINY)
    with pytest.raises(AttributeError):
        cfg.norm = "rmsnorm"


# --- default sizes -------------------------------------------------------------------------------


@pytest.mark.parametrize("d_model", [32, 64, 96, 100, 128, 192, 256, 512, 768, 1000, 4096])
def test_default_d_ff(d_model):
    assert default_d_ff(d_model, "relu") == default_d_ff(d_model, "gelu") == 4 * d_model
    gated = math.ceil(Fraction(8 * d_model, 3) / 64) * 64  # 8/3·d rounded up to a multiple of 64
    assert default_d_ff(d_model, "swiglu") == default_d_ff(d_model, "geglu") == gated
    assert gated % 64 == 0 and gated >= Fraction(8 * d_model, 3)
    assert ArchConfig(**{**TINY, "d_model": d_model, "n_heads": 4}, activation="swiglu").ffn_dim == gated
    assert ArchConfig(**{**TINY, "d_model": d_model, "n_heads": 4}, activation="swiglu", d_ff=40).ffn_dim == 40


def test_explicit_values():
    assert default_d_ff(192, "swiglu") == 512
    assert default_d_ff(128, "geglu") == 384  # 341.3 -> 384
    assert default_d_ff(768, "swiglu") == 2048


@pytest.mark.parametrize("d_model", [64, 96, 128, 160, 192, 256])
def test_ffn_multiple_of_one_matches_plain_ffn_parameters(d_model):
    # three d x d_ff matrices against two d x 4d: within one hidden unit (3·d weights) at every width
    gated = ArchConfig(**{**TINY, "d_model": d_model, "n_heads": 4}, activation="swiglu", ffn_multiple_of=1)
    assert gated.ffn_dim == int(Fraction(8 * d_model, 3))
    assert 0 <= 2 * d_model * 4 * d_model - 3 * d_model * gated.ffn_dim < 3 * d_model
    assert ArchConfig(**{**TINY, "d_model": d_model, "n_heads": 4}, activation="relu", ffn_multiple_of=1).ffn_dim == (
        4 * d_model
    )


def test_ffn_multiple_of_must_be_positive():
    with pytest.raises(ValueError, match="ffn_multiple_of=0 must be a positive integer"):
        ArchConfig(**TINY, ffn_multiple_of=0)


def test_gated_and_plain_parameter_counts_are_comparable():
    cfg = dict(vocab_size=64, d_model=192, n_layers=2, n_heads=4, max_seq_len=16)
    plain = GPT(ArchConfig(**cfg, activation="gelu")).num_parameters(non_embedding=True)
    gated = GPT(ArchConfig(**cfg, activation="swiglu")).num_parameters(non_embedding=True)
    assert abs(gated - plain) / plain < 0.10


# --- parameter and FLOP counts -------------------------------------------------------------------


def _models():
    cfg = ArchConfig(**TINY)
    untied = ArchConfig(**TINY, tie_embeddings=False)
    return [GPT(cfg), GPT(untied), BertMLM(cfg), EncoderDecoder(cfg), ViT(cfg, image_size=8, patch_size=4)]


def test_num_parameters():
    for model in _models():
        total = model.num_parameters()
        assert total == sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
        assert 0 < model.num_parameters(non_embedding=True) < total
    tied, untied = GPT(ArchConfig(**TINY)), GPT(ArchConfig(**TINY, tie_embeddings=False))
    assert untied.num_parameters() - tied.num_parameters() == 64 * 32  # tied head counted once
    # non-embedding leaves out the token table and the learned position table
    assert tied.num_parameters() - tied.num_parameters(non_embedding=True) == 64 * 32 + 16 * 32


def test_flops_per_token_grows_with_seq_len():
    for model in _models():
        f = [model.flops_per_token(t) for t in (8, 64, 512)]
        assert f[0] < f[1] < f[2]
        assert model.flops_per_token(512, include_attention=False) == model.flops_per_token(8, include_attention=False)
    cfg = ArchConfig(**TINY)
    # causal attention sees half the keys: the attention term of GPT is half BERT's
    gpt, bert = GPT(cfg), BertMLM(cfg)
    gpt_attn = gpt.flops_per_token(64) - gpt.flops_per_token(64, include_attention=False)
    bert_attn = bert.flops_per_token(64) - bert.flops_per_token(64, include_attention=False)
    assert gpt_attn * 2 == bert_attn == 4 * 64 * 32 * 2


def test_encoder_decoder_counts_follow_the_split_depths():
    """3-1 has two encoder blocks more than 1-1 and two decoder blocks fewer than 3-3; its attention term
    counts every encoder self-attention and both decoder attentions per decoder block."""
    base = {**TINY, "n_layers": 1}

    def model(enc: int, dec: int) -> EncoderDecoder:
        return EncoderDecoder(ArchConfig(**base, n_encoder_layers=enc, n_decoder_layers=dec))

    split, small, large = model(3, 1), model(1, 1), model(3, 3)
    assert (len(split.encoder.blocks), len(split.decoder.blocks)) == (3, 1)
    encoder_block = sum(p.numel() for p in split.encoder.blocks[0].parameters())
    decoder_block = sum(p.numel() for p in split.decoder.blocks[0].parameters())
    assert decoder_block > encoder_block  # cross-attention and its norm
    assert split.num_parameters() - small.num_parameters() == 2 * encoder_block
    assert large.num_parameters() - split.num_parameters() == 2 * decoder_block
    assert split.matmul_parameters() - small.matmul_parameters() == 2 * sum(
        m.weight.numel() for m in split.encoder.blocks[0].modules() if isinstance(m, torch.nn.Linear)
    )
    attention = split.flops_per_token(64) - split.flops_per_token(64, include_attention=False)
    assert attention == 4 * 64 * 32 * (3 + 2 * 1)


def test_scaled_init_uses_each_stack_depth():
    """GPT-2's residual scaling 1/sqrt(2·depth) takes the depth of the projection's own stack."""
    torch.manual_seed(0)
    cfg = ArchConfig(vocab_size=64, d_model=128, n_heads=4, max_seq_len=8, n_encoder_layers=8, n_decoder_layers=2)
    model = EncoderDecoder(cfg)
    encoder = torch.cat([b.attn.out.weight.flatten() for b in model.encoder.blocks]).std().item()
    decoder = torch.cat([b.attn.out.weight.flatten() for b in model.decoder.blocks]).std().item()
    assert encoder == pytest.approx(0.02 / math.sqrt(16), rel=0.05)
    assert decoder == pytest.approx(0.02 / math.sqrt(4), rel=0.05)


def test_symmetric_depths_build_the_same_model():
    """Setting both depths to n_layers changes nothing, weights included (existing results stay put)."""
    models = []
    for extra in ({}, {"n_encoder_layers": 2, "n_decoder_layers": 2}):
        torch.manual_seed(0)
        models.append(EncoderDecoder(ArchConfig(**TINY, **extra)).state_dict())
    assert models[0].keys() == models[1].keys()
    assert all(torch.equal(models[0][k], models[1][k]) for k in models[0])
