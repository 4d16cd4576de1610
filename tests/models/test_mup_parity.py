"""µP here against the `mup` package (the reference implementation, Yang et al. 2022) on a GPT: the same Adam
learning rate and weight decay for every parameter (`mup.MuAdamW`), the same initial scales (`mup.init`) and the
same readout multiplier (`mup.MuReadout`'s 1/width_mult). The suite builds µP from its own table rather than with
the package because the package needs its own readout layer and a base model instantiated next to every model,
and it leaves attention, the embedding scale and Adam's ε to the user (`models/parametrization.py`)."""

import pytest
import torch
from mup import MuAdamW, MuReadout, MuSharedReadout, set_base_shapes
from mup import init as mup_init

from lit_modules.optim import OptimConfig, build_optimizer, parameter_groups
from models import GPT, ArchConfig


def gpt(d_model: int, tie: bool, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    arch = dict(vocab_size=96, n_layers=2, n_heads=2, pos_encoding="rope", max_seq_len=16, tie_embeddings=tie)
    return GPT(ArchConfig(d_model=d_model, parametrization="mup", base_width=64, **arch))


def with_mu_readout(model: GPT) -> GPT:
    """`model` with the package's readout in place of its `lm_head` (its weights, or the token table shared)."""
    linear = model.lm_head
    if model.cfg.tie_embeddings:
        model.lm_head = MuSharedReadout(model.tok.weight, bias=False)
    else:
        model.lm_head = MuReadout(linear.in_features, linear.out_features, bias=False)
        model.lm_head.weight = linear.weight
    return model


def with_base_shapes(tie: bool) -> GPT:
    """A d_model 256 GPT (m_N = 4) with `mup`'s readout, whose parameters carry `mup`'s infshapes (base 64;
    delta 128 tells the dimensions that grow with width from those that do not)."""
    model, base, delta = (with_mu_readout(gpt(d, tie)) for d in (256, 64, 128))
    return set_base_shapes(model, base, delta=delta, rescale_params=False)


@pytest.mark.parametrize("tie", [True, False])
def test_every_parameters_lr_and_weight_decay_match_muadamw(tie):
    model = with_base_shapes(tie)
    reference = MuAdamW(parameter_groups(model, weight_decay=0.1), lr=1e-2)
    ours, _ = build_optimizer(model, OptimConfig(lr=1e-2, weight_decay=0.1), total_steps=10)

    def settings(optimizer, lr_key):
        return {id(p): (g[lr_key], g["weight_decay"]) for g in optimizer.param_groups for p in g["params"]}

    expected, got = settings(reference, "lr"), settings(ours, "initial_lr")
    names = {id(p): n for n, p in model.named_parameters()}
    assert set(expected) == set(got)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value), names[key]
    assert got[id(model.stack.blocks[0].attn.qkv.weight)] == pytest.approx((1e-2 / 4, 0.4))  # the test has teeth


@pytest.mark.parametrize("tie", [True, False])
def test_initial_scales_match_mup_init(tie):
    """Each matrix's std is what `mup.init.normal_` draws from its std at the base width: σ/√m_N for the hidden
    matrices (both dimensions grow), σ for the embeddings and the readout."""
    model, base = with_base_shapes(tie), gpt(64, tie)
    for name, p in model.named_parameters():
        if p.ndim < 2:
            continue
        reference = torch.empty_like(p)
        reference.infshape = p.infshape
        mup_init.normal_(reference, std=base.get_parameter(name).std().item())
        assert p.std().item() == pytest.approx(reference.std().item(), rel=0.05), name


@pytest.mark.parametrize("tie", [True, False])
def test_logits_are_mureadouts(tie):
    """Our lm_head on `readout_input(h)` (h/m_N) computes what the package's readout computes on h."""
    model = with_base_shapes(tie)
    h = torch.randn(2, 5, 256)
    ours = torch.nn.functional.linear(model.readout_input(h), model.lm_head.weight)
    torch.testing.assert_close(ours, model.lm_head(h))
    assert model.lm_head.width_mult() == 4.0
