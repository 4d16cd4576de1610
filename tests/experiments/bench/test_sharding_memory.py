"""The computed FSDP2 memory per device (`experiments.bench.sharding_memory`): exact counts from a meta-device model,
each sharded term divided by the devices, the activation formula's parts, and the README's tables as printed."""

from __future__ import annotations

import pytest
import torch

from experiments.bench import sharding_memory as sm
from models import GPT, ArchConfig

# every dim 0 (vocabulary, positions, d_model, 3·d_model, d_ff) divisible by 1, 2, 4 and 8
SMALL = ArchConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=2, max_seq_len=16)


def test_the_meta_model_is_counted_exactly_without_allocating():
    counts = sm.count(SMALL)
    torch.manual_seed(0)
    real = GPT(SMALL)
    assert counts.total == sum(p.numel() for p in real.parameters())
    assert counts.block == sum(p.numel() for p in real.stack.blocks[0].parameters())
    assert counts.root == counts.total - SMALL.n_layers * counts.block  # the tied head is the token table, once
    # d 32 pre-norm GPT-2 block: 12·d² + 13·d (QKV, out, FFN weights and biases, two norms)
    assert counts.block == 12 * 32**2 + 13 * 32
    assert counts.root == 64 * 32 + 16 * 32 + 2 * 32  # tokens, learned positions, final norm


def test_gpu_yaml_is_the_92m_gpt():
    plan = sm.resolve(sm.GPU_CONFIG)
    assert (plan.arch.d_model, plan.arch.n_layers, plan.arch.vocab_size, plan.seq, plan.batch) == (768, 12, 8192,
                                                                                                  1024, 16)  # fmt: skip
    assert plan.precision == "bf16-mixed" and plan.act_bytes == 2 and plan.param_bytes == 4
    assert sm.count(plan.arch).total == 92_133_888
    big = sm.resolve(sm.CONFIG_1B3)
    assert (big.arch.d_model, big.arch.n_layers, big.arch.n_heads, big.seq) == (2048, 24, 16, 2048)
    assert 1.2e9 < sm.count(big.arch).total < 1.3e9


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_sharded_states_are_the_total_over_the_devices(world):
    plan = sm.Plan(SMALL, batch=2, seq=16)
    counts = sm.count(SMALL)
    m = sm.memory(plan, world, counts=counts)
    assert m.params * world == 4 * counts.total  # exactly: every dim 0 divides
    assert m.grads == m.params
    assert m.optimizer == 2 * m.params  # AdamW's two fp32 states per parameter
    assert m.total() == m.params + m.grads + m.optimizer + m.unsharded + m.activations


def test_an_uneven_dim_0_is_padded_as_fsdp2_pads_it():
    counts = sm.count(ArchConfig(vocab_size=65, d_model=32, n_layers=1, n_heads=2, max_seq_len=16))
    assert counts.shard(2) > counts.total / 2 and counts.shard(2) - counts.total / 2 == 32 / 2  # one padded row


def test_bf16_mixed_keeps_fp32_states_and_halves_the_activations():
    fp32, mixed = sm.Plan(SMALL, 2, 16, "32-true"), sm.Plan(SMALL, 2, 16, "bf16-mixed")
    a, b = sm.memory(fp32, 2), sm.memory(mixed, 2)
    assert (a.params, a.grads, a.optimizer) == (b.params, b.grads, b.optimizer)
    assert b.activations < a.activations


def test_checkpointing_keeps_each_block_input_and_recomputes_one_block():
    deep = ArchConfig(vocab_size=64, d_model=64, n_layers=8, n_heads=4, max_seq_len=128)
    plan = sm.Plan(deep, batch=4, seq=128)
    counts = sm.count(deep)
    full, ckpt = sm.activations(plan, counts, False), sm.activations(plan, counts, True)
    assert ckpt < full / 3
    # one more layer costs a whole block without checkpointing, its fp32 input (b·s·h·4) with it
    deeper = sm.Plan(ArchConfig(**{**deep.__dict__, "n_layers": 9}), batch=4, seq=128)
    more = sm.count(deeper.arch)
    assert sm.activations(deeper, more, True) - ckpt == 4 * 128 * 64 * 4
    per_layer = sm.activations(deeper, more, False) - full
    assert per_layer == 4 * 128 * (64 * 16 * 4 + 4 * 4)  # 16 h elements and a logsumexp per head and token


def test_an_unsharded_plan_has_no_working_set_and_one_device():
    m = sm.memory(sm.Plan(SMALL, 2, 16), 1, fsdp=False)
    assert m.unsharded == 0 and m.params == 4 * sm.count(SMALL).total
    with pytest.raises(ValueError, match="world=1"):
        sm.memory(sm.Plan(SMALL, 2, 16), 2, fsdp=False)


def test_a_char_vocabulary_must_be_given():
    with pytest.raises(ValueError, match="vocab_size="):
        sm.resolve(("configs/gpt/base.yaml",))
    assert sm.resolve(("configs/gpt/base.yaml",), vocab_size=65).arch.vocab_size == 65


def test_the_command_prints_a_plan_per_device_count(capsys):
    assert sm.main(["-c", "configs/gpt/base.yaml", "-c", "configs/gpt/gpu.yaml", "--world", "2,4", "--batch", "4"]) == 0
    out = capsys.readouterr().out
    assert "micro-batch 4 × 1024" in out and "\n| 2 | 0.17 |" in out and "\n| 4 | 0.09 |" in out


def test_readme_prints_the_planning_tables():
    """The README's tables are `python -m experiments.bench.sharding_memory --readme`'s output."""
    readme = open("README.md", encoding="utf-8").read()
    assert "python -m experiments.bench.sharding_memory --readme" in readme
    assert sm.readme_tables() in readme


def test_grouped_query_attention_and_a_gated_ffn_are_counted_as_configured():
    def per_layer(**arch) -> int:
        """Activation bytes one more block adds (batch 1 × 8 tokens, d 64, 4 heads of 16)."""
        sizes = []
        for depth in (1, 2):
            cfg = ArchConfig(**(dict(vocab_size=64, d_model=64, n_heads=4, max_seq_len=8, n_layers=depth) | arch))
            sizes.append(sm.activations(sm.Plan(cfg, batch=1, seq=8), sm.count(cfg), False))
        return sizes[1] - sizes[0]

    mha = per_layer()
    assert mha - per_layer(n_kv_heads=1) == 8 * 2 * (64 - 16) * 4  # K and V of one head of 16 instead of four
    assert per_layer(activation="swiglu", d_ff=256) - mha == 8 * 256 * 4  # a third hidden tensor
