"""Every ablation axis is really applied in the built model, changes its output, and trains (the newer axes'
formulas: `test_block_newer_axes`)."""

import math
from typing import get_args

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from models import GPT, ArchConfig, BertMLM, EncoderDecoder, ViT
from models.block import Block, StackContext
from models.config import Activation, GeluApproximation, NormName, NormPlacement, PosEncoding
from models.ffn import FeedForward
from models.norms import NORMS, build_norm
from models.positional import POSITIONAL, sinusoidal_table
from tests.models.block_cases import IDS, NORM_CLASSES, TINY, _gpt, _norm_modules


def _assert_all_outputs_differ(outputs: dict) -> None:
    names = list(outputs)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not torch.allclose(outputs[a], outputs[b], atol=1e-6), f"{a} and {b} give the same output"


# --- each axis value is present in the model -----------------------------------------------------


@pytest.mark.parametrize("pos", get_args(PosEncoding))
def test_pos_encoding_is_built(pos):
    model = _gpt(pos_encoding=pos)
    assert type(model.stack.pos) is POSITIONAL[pos]
    learned = [m for m in model.modules() if isinstance(m, nn.Embedding) and m is not model.tok]
    assert len(learned) == (pos in ("learned", "t5"))


@pytest.mark.parametrize("norm", get_args(NormName))
@pytest.mark.parametrize("placement", get_args(NormPlacement))
def test_norm_and_placement_are_built(norm, placement):
    model = _gpt(norm=norm, norm_placement=placement)
    norms = _norm_modules(model)
    # per block: attention and FFN norms (two each under peri); a final norm but under post placement; peri's
    # embedding norm
    peri = placement == "peri"
    assert len(norms) == 2 * 2 * (1 + peri) + (placement != "post") + peri
    assert all(type(m) is NORM_CLASSES[norm] for m in norms)
    assert all(block.placement == placement for block in model.stack.blocks)
    assert isinstance(model.stack.final_norm, nn.Identity) == (placement == "post")


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("norm", get_args(NormName))
def test_norm_parameters_follow_bias(norm, bias):
    """LayerNorm has a bias exactly when the config does; RMSNorm never has one."""
    cfg = ArchConfig(**TINY, norm=norm, bias=bias, norm_eps=1e-3)
    layer = build_norm(cfg)
    assert type(layer) is NORM_CLASSES[norm] and set(NORMS) == set(NORM_CLASSES)
    expected = {"weight", "bias"} if norm != "rmsnorm" and bias else {"weight"}
    assert {name for name, _ in layer.named_parameters()} - {"alpha"} == expected
    assert layer.weight.shape == (cfg.d_model,)
    assert getattr(layer, "eps", 1e-3) == 1e-3  # DyT has no statistics, so no epsilon


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_post_norm_normalises_the_residual_stream(norm):
    """Post-LN is norm(x + f(x)): a block's output is normalised; pre-LN's x + f(norm(x)) is not."""
    x = torch.randn(2, 8, 32) * 3 + 1
    ctx = StackContext(mask=None, is_causal=True, rope=None, offset=0, memory=None, memory_mask=None, cache=None)
    outs = {}
    for placement in ("pre", "post"):
        torch.manual_seed(0)
        outs[placement] = Block(ArchConfig(**TINY, norm=norm, norm_placement=placement))(x, ctx, 0)
    rms = outs["post"].pow(2).mean(-1).sqrt()
    torch.testing.assert_close(rms, torch.ones_like(rms), atol=1e-3, rtol=0)
    if norm == "layernorm":
        torch.testing.assert_close(outs["post"].mean(-1), torch.zeros(2, 8), atol=1e-5, rtol=0)
    assert not torch.allclose(outs["pre"].pow(2).mean(-1).sqrt(), torch.ones(2, 8), atol=0.1)


@pytest.mark.parametrize("activation", get_args(Activation))
@pytest.mark.parametrize("approx", get_args(GeluApproximation))
def test_ffn_matches_its_formula(activation, approx):
    torch.manual_seed(0)
    cfg = ArchConfig(**TINY, activation=activation, gelu_approximate=approx)
    ffn = FeedForward(cfg)
    gated = activation in ("swiglu", "geglu")
    assert ffn.up.out_features == (2 if gated else 1) * cfg.ffn_dim
    assert ffn.down.in_features == cfg.ffn_dim
    act = {
        "relu": F.relu,
        "gelu": lambda t: F.gelu(t, approximate=approx),
        "silu": F.silu,
        "swiglu": F.silu,
        "geglu": lambda t: F.gelu(t, approximate=approx),
    }[activation]
    x = torch.randn(2, 3, 32)
    h = ffn.up(x)
    if gated:  # the gate is the first half of the fused projection
        gate, up = h[..., : cfg.ffn_dim], h[..., cfg.ffn_dim :]
        expected = ffn.down(act(gate) * up)
    else:
        expected = ffn.down(act(h))
    torch.testing.assert_close(ffn(x), expected)


@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
def test_kv_heads_are_built(n_kv_heads):
    model = _gpt(n_kv_heads=n_kv_heads)
    kv = n_kv_heads or 4
    for block in model.stack.blocks:
        assert block.attn.qkv.out_features == 32 + 2 * kv * 8
        assert block.attn.n_kv_heads == kv


def test_flags_are_built():
    model = _gpt(embedding_norm=True, tie_embeddings=False, bias=False)
    assert isinstance(model.stack.embed_norm, nn.LayerNorm) and model.stack.embed_norm.bias is None
    assert model.lm_head.weight is not model.tok.weight
    assert all(m.bias is None for m in model.modules() if isinstance(m, nn.Linear))
    tied = _gpt()
    assert tied.lm_head.weight is tied.tok.weight


def test_scaled_residual_init():
    torch.manual_seed(0)
    model = GPT(ArchConfig(**{**TINY, "d_model": 64, "init_std": 0.02}))
    assert model.stack.blocks[0].attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.1)
    for block in model.stack.blocks:
        assert block.attn.out.weight.std().item() == pytest.approx(0.02 / 2, rel=0.1)  # / sqrt(2·2 layers)
        assert block.ffn.down.weight.std().item() == pytest.approx(0.02 / 2, rel=0.1)


@pytest.mark.parametrize("family", [GPT, EncoderDecoder])
def test_scaled_token_embeddings_match_the_sinusoid_amplitude(family):
    """Vaswani et al. add sqrt(d)-scaled token embeddings to unit-amplitude sinusoids: the scaled
    lookup must start at unit variance, or the positions swamp the tokens (0.02·sqrt(128) ≈ 0.23)."""
    torch.manual_seed(0)
    model = family(ArchConfig(**{**TINY, "d_model": 128, "vocab_size": 512, "pos_encoding": "sinusoidal"}))
    ids = torch.arange(512).unsqueeze(0)
    tokens = model.tok(ids)
    assert tokens.std().item() == pytest.approx(1.0, rel=0.05)
    positions = sinusoidal_table(64, 128)
    assert positions.pow(2).mean().sqrt().item() == pytest.approx(math.sqrt(0.5), rel=0.01)
    # unscaled schemes keep the plain init_std
    plain = family(ArchConfig(**{**TINY, "d_model": 128, "vocab_size": 512, "pos_encoding": "rope"}))
    assert plain.tok.weight.std().item() == pytest.approx(TINY["init_std"], rel=0.05)


# --- changing an axis changes the output (same seed) ---------------------------------------------

AXES = {
    "pos_encoding": get_args(PosEncoding),
    "norm": get_args(NormName),
    "norm_placement": get_args(NormPlacement),
    "activation": get_args(Activation),
    "gelu_approximate": get_args(GeluApproximation),
    "n_kv_heads": (None, 2, 1),
    "embedding_norm": (False, True),
}


@pytest.mark.parametrize("axis", list(AXES))
def test_axis_changes_output(axis):
    _assert_all_outputs_differ({value: _gpt(**{axis: value})(IDS) for value in AXES[axis]})


# --- gradients reach every parameter -------------------------------------------------------------

CONFIGS = {
    "default": dict(),
    "t5-rmsnorm-post": dict(pos_encoding="t5", norm="rmsnorm", norm_placement="post"),
    "rope-swiglu-gqa": dict(pos_encoding="rope", activation="swiglu", n_kv_heads=2, rope_fraction=0.5),
    "alibi-geglu-mqa": dict(pos_encoding="alibi", activation="geglu", n_kv_heads=1, embedding_norm=True, bias=False),
    "sinusoidal-untied": dict(pos_encoding="sinusoidal", tie_embeddings=False, gelu_approximate="tanh"),
}


def _assert_every_parameter_has_grad(model: nn.Module) -> None:
    for name, p in model.named_parameters():
        assert p.requires_grad
        assert p.grad is not None, f"{name} got no gradient"
        assert p.grad.abs().sum() > 0, f"{name} has an all-zero gradient"


def _lm_loss(logits: torch.Tensor) -> torch.Tensor:
    targets = torch.randint(0, logits.shape[-1], logits.shape[:-1], generator=torch.Generator().manual_seed(1))
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("model_cls", [GPT, BertMLM, EncoderDecoder])
def test_gradients_reach_every_parameter(model_cls, config):
    torch.manual_seed(0)
    model = model_cls(ArchConfig(**TINY, **CONFIGS[config])).train()
    if model_cls is GPT:
        logits = model(IDS)  # seq = max_seq_len: every learned position row is used
    elif model_cls is BertMLM:
        logits = model(IDS, attention_mask=torch.tensor([[1] * 8, [1] * 6 + [0] * 2]))
    else:
        logits = model(IDS, IDS.flip(1), src_attention_mask=torch.tensor([[1] * 8, [1] * 5 + [0] * 3]))
    _lm_loss(logits).backward()
    _assert_every_parameter_has_grad(model)
    if config == "default":  # each learned position row gets its own gradient
        for module in model.modules():
            if type(module).__name__ == "LearnedPositions":
                assert (module.table.weight.grad.abs().sum(-1) > 0).all()


@pytest.mark.parametrize(
    "pos, pool, extra",
    [
        ("learned", "cls", {}),
        ("sinusoidal", "mean", {"norm": "rmsnorm", "activation": "swiglu"}),
        ("none", "cls", {"norm_placement": "post", "n_kv_heads": 1}),
    ],
)
def test_vit_gradients_reach_every_parameter(pos, pool, extra):
    torch.manual_seed(0)
    model = ViT(ArchConfig(**TINY, pos_encoding=pos, **extra), image_size=8, patch_size=4, pool=pool).train()
    logits = model(torch.randn(2, 3, 8, 8))
    F.cross_entropy(logits, torch.tensor([1, 7])).backward()
    _assert_every_parameter_has_grad(model)


def test_block_has_cross_attention_only_when_asked():
    cfg = ArchConfig(**TINY)
    assert Block(cfg).cross is None and Block(cfg).cross_norm is None
    block = Block(cfg, cross_attention=True)
    assert block.cross.cross and isinstance(block.cross_norm, nn.LayerNorm)
    model = EncoderDecoder(cfg)
    assert all(b.cross is None for b in model.encoder.blocks)
    assert all(b.cross is not None for b in model.decoder.blocks)
    assert model.decoder.causal and not model.encoder.causal
