import math

import pytest
import torch

from lit_modules.optim import OptimConfig, adamw_kernel, build_optimizer, parameter_groups, warmup_cosine
from models import GPT, ArchConfig, ViT


def test_weight_decay_only_on_matrices():
    model = GPT(ArchConfig(vocab_size=20, d_model=32, n_layers=1, n_heads=2, max_seq_len=16, norm="layernorm"))
    decay, no_decay = parameter_groups(model, 0.1)
    decayed = {id(p) for p in decay["params"]}
    named = dict(model.named_parameters())
    assert id(named["stack.blocks.0.attn.qkv.weight"]) in decayed
    assert id(named["stack.blocks.0.ffn.down.weight"]) in decayed
    for name in (
        "tok.weight",
        "stack.pos.table.weight",
        "stack.blocks.0.attn_norm.weight",
        "stack.blocks.0.attn.qkv.bias",
    ):
        assert id(named[name]) not in decayed, name
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_vit_tokens_and_positions_not_decayed():
    model = ViT(ArchConfig(d_model=32, n_layers=1, n_heads=2), image_size=8, patch_size=2, in_channels=1)
    decay, _ = parameter_groups(model, 0.1)
    decayed = {id(p) for p in decay["params"]}
    assert id(model.cls) not in decayed and id(model.patch.weight) in decayed


@pytest.mark.parametrize("warmup", [0, 10])
def test_warmup_then_cosine_to_floor(warmup):
    total = 100
    values = [warmup_cosine(s, warmup, total, 0.1) for s in range(total + 5)]
    if warmup:
        assert values[0] == pytest.approx(1 / warmup) and values[warmup - 1] == pytest.approx(1.0)
        assert all(a < b for a, b in zip(values[: warmup - 1], values[1:warmup]))
    else:
        assert values[0] == pytest.approx(1.0)
    assert values[total] == pytest.approx(0.1) and values[-1] == pytest.approx(0.1)
    mid = warmup + (total - warmup) // 2
    assert values[mid] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (mid - warmup) / (total - warmup))))


def test_schedule_drives_lr():
    model = torch.nn.Linear(4, 4)
    optimizer, schedule = build_optimizer(model, OptimConfig(lr=1.0, warmup_steps=4), total_steps=20)
    lrs = []
    for _ in range(6):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert lrs[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])


@pytest.mark.parametrize(
    "precision, fused, foreach",
    [
        ("32-true", True, None),  # full precision: the fused kernel, as before
        ("64-true", True, None),
        ("bf16-true", True, None),
        ("bf16-mixed", False, True),  # Lightning unscales and clips before a foreach step, not a fused one
        ("16-mixed", False, True),
    ],
)
def test_adamw_kernel_follows_the_precision(precision, fused, foreach):
    optimizer, _ = build_optimizer(torch.nn.Linear(4, 4), OptimConfig(), total_steps=10, precision=precision)
    assert (optimizer.defaults["fused"], optimizer.defaults["foreach"]) == (fused, foreach)
    assert getattr(optimizer, "_step_supports_amp_scaling", False) is fused  # what Lightning's clipping refuses


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_unfused_config_keeps_torch_default(precision):
    assert adamw_kernel(False, precision) == {"fused": False}


def test_default_precision_is_full_and_foreach_matches_fused():
    torch.manual_seed(0)
    fused_model, foreach_model = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
    foreach_model.load_state_dict(fused_model.state_dict())
    fused, _ = build_optimizer(fused_model, OptimConfig(warmup_steps=0), total_steps=10)
    assert fused.defaults["fused"] is True
    foreach, _ = build_optimizer(foreach_model, OptimConfig(warmup_steps=0), total_steps=10, precision="bf16-mixed")
    x = torch.randn(4, 8)
    for _ in range(3):
        for model, optimizer in ((fused_model, fused), (foreach_model, foreach)):
            model(x).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
    # the same update up to float rounding: only the kernel differs
    torch.testing.assert_close(foreach_model.state_dict(), fused_model.state_dict())


def test_positional_parameters_get_their_own_learning_rate():
    """`positional_lr_scale` puts the positional scheme's parameters (here T5's bias table) in a third,
    undecayed group at lr × scale, which the schedule scales like the others; 1 keeps two groups."""
    model = GPT(ArchConfig(vocab_size=20, d_model=32, n_layers=1, n_heads=2, max_seq_len=16, pos_encoding="t5"))
    bias = model.stack.pos.bias.weight
    optimizer, schedule = build_optimizer(model, OptimConfig(lr=1e-3, warmup_steps=2, positional_lr_scale=20), 10)
    *_, positional = optimizer.param_groups
    assert [id(p) for p in positional["params"]] == [id(bias)]
    assert positional["lr"] == pytest.approx(0.5 * 2e-2) and positional["weight_decay"] == 0.0
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.5 * 1e-3)  # warmup step 1 of 2
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters()))
    optimizer.step()
    schedule.step()
    assert positional["lr"] == pytest.approx(2e-2)
    assert len(build_optimizer(model, OptimConfig(), 10)[0].param_groups) == 2


def test_a_positional_step_moves_the_bias_by_the_scaled_learning_rate():
    """Adam's first step moves every parameter with a gradient by about its group's lr: 20× for the bias."""
    model = GPT(ArchConfig(vocab_size=20, d_model=32, n_layers=1, n_heads=2, max_seq_len=16, pos_encoding="t5"))
    cfg = OptimConfig(lr=1e-3, warmup_steps=0, weight_decay=0.0, positional_lr_scale=20, fused=False)
    optimizer, _ = build_optimizer(model, cfg, 10)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model(torch.randint(0, 20, (2, 16))).logsumexp(-1).mean().backward()
    optimizer.step()
    moved = {n: (p.detach() - before[n]).abs().max().item() for n, p in model.named_parameters()}
    assert moved["stack.pos.bias.weight"] == pytest.approx(2e-2, rel=1e-3)
    assert moved["stack.blocks.0.attn.qkv.weight"] == pytest.approx(1e-3, rel=1e-3)


def test_positional_lr_scale_must_be_positive():
    with pytest.raises(ValueError, match="positional_lr_scale=0 must be positive"):
        OptimConfig(positional_lr_scale=0)
