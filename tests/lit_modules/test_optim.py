import math

import pytest
import torch

from lit_modules.optim import OptimConfig, build_optimizer, parameter_groups, warmup_cosine
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
