"""The forward-pass probes of the training diagnostics: the attention statistics are those of the probabilities
the attention module applies (whatever its mask: causal, padding, a relative bias, a soft-cap), and probing a
forward changes nothing it computes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from models import GPT, ArchConfig, BertMLM, EncoderDecoder, ViT
from models.attention import Attention
from models.probes import Probe, attention_stats, short_name
from models.relative_bias import ScoreMask

ARCH = dict(d_model=32, n_heads=4, n_layers=2, vocab_size=50, max_seq_len=16, dropout=0.0)


def applied_probabilities(attention: Attention, x, **kwargs):
    """The probabilities a self-attention module applies, read from its output: `x` carries each token's one-hot
    position in its last T channels; the value projection copies them into every head's first T channels and the
    output projection is the identity, so head h's output row i is p_i· of head h."""
    T, hd = x.shape[1], attention.head_dim
    kv_dim = attention.n_kv_heads * hd
    with torch.no_grad():
        values = attention.qkv.weight[-kv_dim:]
        values.zero_()
        for h in range(attention.n_kv_heads):
            values[h * hd : h * hd + T, -T:] = torch.eye(T)
        attention.out.weight.copy_(torch.eye(attention.out.weight.shape[0]))
        y = attention(x, **kwargs)  # (B, T, H·hd)
    return y.unflatten(-1, (attention.n_heads, hd))[..., :T].transpose(1, 2)  # (B, H, T, T)


def inputs_with_positions(B: int, T: int, d: int, seed: int = 0):
    """Random inputs whose last T channels are the one-hot position (the identity values read them)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, d, generator=g)
    x[..., -T:] = torch.eye(T)
    return x


def expected_stats(probs, visible_queries, coords=None):
    entropy = torch.special.entr(probs).sum(-1)
    w = visible_queries.float().expand_as(entropy)
    out = {"entropy": (entropy * w).sum((0, 2)) / w.sum((0, 2))}
    if coords is not None:
        gaps = torch.cdist(coords, coords)
        out["distance"] = ((probs * gaps).sum(-1) * w).sum((0, 2)) / w.sum((0, 2))
    return out


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, module, q, k, mask, is_causal):
        self.calls.append((q, k, mask, is_causal))


@pytest.mark.parametrize("case", ["causal", "bidirectional", "padding", "t5", "alibi", "softcap", "scale"])
def test_statistics_are_those_of_the_probabilities_attention_applies(case):
    T, d = 8, 32
    cfg = ArchConfig(**{**ARCH, "d_model": d, "bias": False},
                     **({"attn_softcap": 0.5} if case == "softcap" else {}),
                     **({"attn_scale": 0.9} if case == "scale" else {}))  # fmt: skip
    torch.manual_seed(1)
    attention = Attention(cfg)
    torch.nn.init.normal_(attention.qkv.weight, std=0.6)  # peaked attention: entropies far from uniform
    x = inputs_with_positions(2, T, d)
    kwargs, valid = {}, torch.ones(2, 1, T, dtype=torch.bool)
    if case in ("causal", "softcap", "scale"):
        kwargs = {"is_causal": True}
    elif case == "padding":
        keep = torch.tensor([[1] * T, [1] * 5 + [0] * (T - 5)])
        kwargs = {"mask": torch.zeros(2, 1, 1, T).masked_fill(keep[:, None, None, :] == 0, float("-inf"))}
        valid = (keep == 1)[:, None, :]
    elif case in ("t5", "alibi"):
        from models.positional import build_positional

        pos = build_positional(ArchConfig(**{**ARCH, "pos_encoding": case}), causal=True)
        for table in pos.parameters():  # T5's learned buckets: far from zero, so the bias matters
            torch.nn.init.normal_(table, std=2.0)
        kwargs = {"mask": ScoreMask(pos.score_bias(T, T, 0), None, 0), "is_causal": True}
    probs = applied_probabilities(attention, x, **kwargs)
    assert torch.allclose(probs.sum(-1), torch.ones(()), atol=1e-5)
    recorder = Recorder()
    attention.probe = recorder
    attention(x, **kwargs)
    q, k, mask, is_causal = recorder.calls[0]
    coords = torch.arange(T, dtype=torch.float32)[:, None]
    stats = attention_stats(q, k, mask, is_causal, attention.scale, attention.attn_softcap, coords)
    expected = expected_stats(probs, valid, coords)
    assert torch.allclose(stats.entropy, expected["entropy"], atol=1e-4), (stats.entropy, expected["entropy"])
    assert torch.allclose(stats.distance, expected["distance"], atol=1e-4)
    assert (stats.entropy < math.log(T) - 0.05).all()  # the peaked weights were seen, not a uniform mask


def test_max_logit_is_the_largest_raw_logit_over_visible_pairs_only():
    q = torch.zeros(1, 1, 3, 2)
    k = torch.zeros(1, 1, 3, 2)
    q[0, 0, 0, 0], k[0, 0, 2, 0] = 10.0, 10.0  # a huge logit, but on a future key: hidden by causality
    q[0, 0, 2, 1], k[0, 0, 1, 1] = 2.0, 3.0  # query 2 sees key 1: logit 6·scale
    stats = attention_stats(q, k, None, True, 1.0, 5.0, None)  # the soft-cap does not cap the reported logit
    assert stats.max_logit.tolist() == [6.0]
    assert stats.distance.isnan().all()  # no coordinates, no distance


def test_uniform_attention_has_entropy_log_keys():
    q, k = torch.zeros(2, 3, 5, 4), torch.randn(2, 3, 7, 4)
    stats = attention_stats(q, k, None, False, None, None, None)
    assert torch.allclose(stats.entropy, torch.full((3,), math.log(7)))


def test_short_names():
    assert short_name("stack.blocks.3.attn") == "block3.attn"
    assert short_name("decoder.blocks.10.cross") == "decoder.block10.cross"
    assert short_name("stack.blocks.0") == "block0"


def families(checkpointing: bool):
    arch = {**ARCH, "activation_checkpointing": checkpointing, "dropout": 0.1}  # the probes must draw no number
    cfg = ArchConfig(**arch)
    ids = torch.randint(0, 50, (3, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 8:] = 0
    return {
        "gpt": (GPT(cfg), (ids,)),
        "bert": (BertMLM(cfg), (ids, mask)),
        "translation": (EncoderDecoder(ArchConfig(**arch, n_decoder_layers=1)), (ids, ids[:, :9], mask)),
        "vit": (ViT(ArchConfig(**{**arch, "vocab_size": 1}), image_size=8, patch_size=2), (torch.randn(3, 3, 8, 8),)),
    }


@pytest.mark.parametrize("family", ["gpt", "bert", "translation", "vit"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_probing_records_every_module_and_changes_nothing(family, checkpointing):
    model, args = families(checkpointing)[family]
    model.train()
    torch.manual_seed(5)
    plain = model(*args)
    plain.square().mean().backward()
    plain_grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    torch.manual_seed(5)
    with Probe(model, rows=2) as probe:
        probed = model(*args)
        probed.square().mean().backward()
    assert torch.equal(plain, probed)
    probed_grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert len(probed_grads) == len(plain_grads) and all(map(torch.equal, plain_grads, probed_grads))
    attention = [n for n, m in model.named_modules() if isinstance(m, Attention)]
    assert sorted(probe.attention) == sorted(short_name(n) for n in attention)
    assert len(probe.residual_rms) == sum(1 for _ in probe.blocks()) >= 2
    assert set(probe.output) == {"logit_mean", "logit_max", "log_z"}
    for name, stats in probe.attention.items():
        assert stats.entropy.shape == (ARCH["n_heads"],) and torch.isfinite(stats.entropy).all()
        assert torch.isfinite(stats.max_logit).all()
        assert stats.distance.isnan().all() == name.endswith("cross")
    # the probe is gone: the modules run as before
    assert all(m.probe is None for m in model.modules() if isinstance(m, Attention))


def test_vit_distance_is_in_pixels_and_leaves_out_the_cls_token():
    vit = ViT(ArchConfig(**{**ARCH, "vocab_size": 1}), image_size=8, patch_size=2)
    coords = vit.token_coordinates(17)
    assert coords[0].isnan().all() and coords[1:].tolist()[:5] == [[0, 0], [0, 2], [0, 4], [0, 6], [2, 0]]
    q, k = torch.zeros(1, 1, 17, 4), torch.randn(1, 1, 17, 4)  # uniform attention over all 17 tokens
    stats = attention_stats(q, k, None, False, None, None, coords)
    patch = coords[1:]
    mean_gap = torch.cdist(patch, patch).sum() / 17 / 16  # CLS key: weight 1/17 at no distance
    assert stats.distance.item() == pytest.approx(mean_gap.item(), rel=1e-5)


def test_padded_queries_are_left_out():
    """A padded query's row is a real distribution (over the real keys) but no token's: it is not averaged."""
    q, k = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    pad = torch.tensor([0.0, 0.0, 0.0, float("-inf")])[None, None, None, :]
    stats = attention_stats(q, k, pad, False, None, None, None)
    probs = F.softmax(q @ k.transpose(-2, -1) / math.sqrt(8) + pad, -1)
    expected = torch.special.entr(probs).sum(-1)[0, :, :3].mean(-1)
    assert torch.allclose(stats.entropy, expected, atol=1e-6)
