"""Attention against an explicit softmax reference: MHA, GQA, MQA, masks, RoPE, cross, KV cache."""

import math

import pytest
import torch

from models import ArchConfig
from models.attention import Attention, LayerCache
from models.positional import RotaryPositions, apply_rotary

TINY = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=16)


def _reference(attn: Attention, x, memory=None, *, causal=False, additive=None, rope=None, scale=None):
    """softmax(q kᵀ·scale + mask) v with the kv heads shared by groups of query heads."""
    H, Hkv, hd = attn.n_heads, attn.n_kv_heads, attn.head_dim
    B, T, _ = x.shape
    if memory is None:
        w, b = attn.qkv.weight, attn.qkv.bias
        q, k, v = (x @ w.T + b).split((H * hd, Hkv * hd, Hkv * hd), dim=-1)
    else:
        q = x @ attn.q.weight.T + attn.q.bias
        k, v = (memory @ attn.kv.weight.T + attn.kv.bias).split(Hkv * hd, dim=-1)
    q = q.view(B, T, H, hd).transpose(1, 2)
    k = k.reshape(B, -1, Hkv, hd).transpose(1, 2)
    v = v.reshape(B, -1, Hkv, hd).transpose(1, 2)
    if rope is not None:
        q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
    # query head h reads kv head h // (H / Hkv)
    k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
    scores = q @ k.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(hd))
    if additive is not None:
        scores = scores + additive
    if causal:
        S = k.shape[2]
        scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(S - T + 1), float("-inf"))
    y = scores.softmax(-1) @ v
    return y.transpose(1, 2).reshape(B, T, -1) @ attn.out.weight.T + attn.out.bias


def _attention(n_kv_heads=None, cross=False, **kw) -> Attention:
    torch.manual_seed(0)
    attn = Attention(ArchConfig(**TINY, n_kv_heads=n_kv_heads, **kw), cross=cross).double()
    for p in attn.parameters():  # random biases too, so a mix-up of bias slices shows
        torch.nn.init.normal_(p, std=0.3)
    return attn


@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_matches_reference(n_kv_heads, causal):
    attn = _attention(n_kv_heads)
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    torch.testing.assert_close(attn(x, is_causal=causal), _reference(attn, x, causal=causal))


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_kv_heads_shrink_projection(n_kv_heads):
    attn = _attention(n_kv_heads)
    assert attn.qkv.out_features == 32 + 2 * n_kv_heads * 8


@pytest.mark.parametrize("n_kv_heads", [2, 1])
def test_gqa_equals_mha_with_shared_kv_weights(n_kv_heads):
    """GQA is MHA whose k/v heads are copies within each group (head h reads kv head h // group)."""
    gqa, mha = _attention(n_kv_heads), _attention(None)
    group, hd = 4 // n_kv_heads, 8
    w, b = gqa.qkv.weight.data, gqa.qkv.bias.data
    q_w, k_w, v_w = w.split((32, n_kv_heads * hd, n_kv_heads * hd))
    q_b, k_b, v_b = b.split((32, n_kv_heads * hd, n_kv_heads * hd))

    def expand(t):
        return t.reshape(n_kv_heads, hd, *t.shape[1:]).repeat_interleave(group, dim=0).reshape(4 * hd, *t.shape[1:])

    mha.qkv.weight.data = torch.cat((q_w, expand(k_w), expand(v_w)))
    mha.qkv.bias.data = torch.cat((q_b, expand(k_b), expand(v_b)))
    mha.out.load_state_dict(gqa.out.state_dict())
    x = torch.randn(2, 5, 32, dtype=torch.float64)
    torch.testing.assert_close(gqa(x, is_causal=True), mha(x, is_causal=True))


@pytest.mark.parametrize("n_kv_heads", [None, 1])
def test_masks_rope_and_scale(n_kv_heads):
    attn = _attention(n_kv_heads, attn_scale=1.0)
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    rope = tuple(t.double() for t in RotaryPositions(ArchConfig(**TINY, pos_encoding="rope"), True).rotary(6))
    additive = torch.randn(1, 4, 6, 6, dtype=torch.float64)
    torch.testing.assert_close(
        attn(x, mask=additive, rope=rope), _reference(attn, x, additive=additive, rope=rope, scale=1.0)
    )
    boolean = torch.rand(2, 1, 6, 6) > 0.3
    boolean[..., 0] = True  # every query sees something
    additive = torch.zeros(2, 1, 6, 6, dtype=torch.float64).masked_fill(~boolean, float("-inf"))
    expected = _reference(attn, x, additive=additive, scale=1.0)
    torch.testing.assert_close(attn(x, mask=boolean), expected)


@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
def test_cross_attention_matches_reference(n_kv_heads):
    attn = _attention(n_kv_heads, cross=True)
    x, memory = torch.randn(2, 3, 32, dtype=torch.float64), torch.randn(2, 9, 32, dtype=torch.float64)
    pad = torch.zeros(2, 1, 1, 9, dtype=torch.float64)
    pad[1, ..., 6:] = float("-inf")
    torch.testing.assert_close(attn(x, memory=memory, mask=pad), _reference(attn, x, memory, additive=pad))
    # with a cache the memory's k, v are computed once and reused
    cache = LayerCache(8)
    first = attn(x, memory=memory, mask=pad, cache=cache)
    assert cache.memory is not None
    torch.testing.assert_close(attn(x, memory=None, mask=pad, cache=cache), first)


@pytest.mark.parametrize("n_kv_heads", [None, 1])
def test_kv_cache_steps_equal_full_causal_attention(n_kv_heads):
    attn = _attention(n_kv_heads)
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    full = attn(x, is_causal=True)
    cache = LayerCache(7)
    prefix = attn(x[:, :4], is_causal=True, cache=cache, offset=0)
    steps = [attn(x[:, t : t + 1], cache=cache, offset=t) for t in range(4, 7)]
    torch.testing.assert_close(torch.cat([prefix, *steps], dim=1), full)
    assert cache.k.shape == (2, attn.n_kv_heads, 7, 8)  # the cache holds kv heads, not query heads
    with pytest.raises(ValueError, match="KV cache holds 7 positions"):
        attn(x[:, :1], cache=cache, offset=7)


def test_cache_reorder_selects_rows():
    cache = LayerCache(4)
    k = torch.arange(3.0)[:, None, None, None].expand(3, 1, 2, 2)
    cache.append(k, k + 10, 0)
    cache.memory = (k, k)
    cache.reorder(torch.tensor([2, 2, 0]))
    assert cache.k[:, 0, 0, 0].tolist() == [2.0, 2.0, 0.0]
    assert cache.v[:, 0, 0, 0].tolist() == [12.0, 12.0, 10.0]
    assert cache.memory[0][:, 0, 0, 0].tolist() == [2.0, 2.0, 0.0]
