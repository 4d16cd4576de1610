"""T5's causal bias split at its last bucket (`models.far_bias`): the far keys with no mask, the band with the
bucketed bias, merged by log-sum-exp, gives the dense mask's outputs and every gradient, T5's table included."""

import pytest
import torch
import torch.nn.functional as F

from models import GPT, EncoderDecoder, far_bias, relative_bias
from models.relative_bias import RelativeBias, ScoreMask, bias_attention
from tests.models.test_relative_bias import _assert_same, _both_paths, _cfg

# a small last bucket's first distance, so that short test sequences have far keys
SMALL_T5 = {"t5_num_buckets": 8, "t5_max_distance": 12}


def _far_mask(H: int, T: int, far: int) -> ScoreMask:
    """A causal bias with one value per head at every distance ≤ −far, as T5's last bucket."""
    per_distance = torch.randn(H, 2 * T - 1)
    per_distance[:, : T - far] = per_distance[:, :1]
    return ScoreMask(RelativeBias(per_distance.requires_grad_(), T, T, far=far), None, 0)


def _per_bucket(grad: torch.Tensor, T: int, far: int) -> torch.Tensor:
    """The far distances share one number: their gradients summed, as the bucket's embedding sums them."""
    return torch.cat([grad[:, : T - far].sum(1, keepdim=True), grad[:, T - far :]], 1)


def _blocks(monkeypatch, block: int) -> None:
    monkeypatch.setattr(far_bias, "FORWARD_BLOCK", block)
    monkeypatch.setattr(far_bias, "BACKWARD_BLOCK", max(1, block // 2))  # different, as by default


def _spy(monkeypatch) -> list:
    calls = []
    apply = far_bias.FarBandAttention.apply
    monkeypatch.setattr(far_bias.FarBandAttention, "apply", lambda *a: calls.append(a) or apply(*a))
    return calls


@pytest.mark.parametrize(
    "T, far, block",
    [(9, 4, 4), (40, 7, 7), (40, 7, 16), (45, 20, 8), (12, 11, 32), (300, 113, 32), (257, 113, 128), (300, 113, 64)],
)
def test_split_equals_sdpa_with_the_dense_mask(monkeypatch, T, far, block):
    """Outputs and the gradients of q, k, v and the per-distance table, for T a multiple of the band's blocks or
    not, a band wider than the blocks or narrower, one far key (T = far + 1) or many."""
    _blocks(monkeypatch, block)
    calls = _spy(monkeypatch)
    torch.manual_seed(0)
    B, H, hd = 2, 3, 8
    q, k, v = (torch.randn(B, T, H, hd).transpose(1, 2).requires_grad_() for _ in range(3))  # SDPA's layout
    mask = _far_mask(H, T, far)
    inputs = (q, k, v, mask.bias.per_distance)
    out = bias_attention(q, k, v, mask, scale=0.3)
    assert len(calls) == 1
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.dense(torch.float32), scale=0.3)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    grad_out = torch.randn_like(out)
    fast, dense = torch.autograd.grad(out, inputs, grad_out), torch.autograd.grad(ref, inputs, grad_out)
    for a, b in zip(fast[:3], dense[:3]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(_per_bucket(fast[3], T, far), _per_bucket(dense[3], T, far), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "T, offset, padded, dtype",
    [(8, 0, False, torch.float32), (30, 4, False, torch.float32), (30, 0, True, torch.float32),
     (30, 0, False, torch.bfloat16)],
)  # fmt: skip
def test_no_far_key_an_offset_padding_or_half_precision_keep_the_block_path(T, offset, padded, dtype):
    mask = _far_mask(3, T, far=8)
    if offset or padded:
        padding = torch.zeros(1, 1, 1, T) if padded else None
        mask = ScoreMask(RelativeBias(mask.bias.per_distance, T - offset, T, far=8), padding, offset or 0)
    assert not far_bias.splittable(torch.zeros(1, dtype=dtype), mask)
    assert far_bias.splittable(torch.zeros(1), _far_mask(3, 9, far=8))


def test_t5s_far_distance_is_its_last_buckets_first():
    from models.positional import T5RelativeBias, t5_relative_bucket

    cfg = _cfg("t5", "blockwise")
    causal, bidirectional = T5RelativeBias(cfg, causal=True), T5RelativeBias(cfg, causal=False)
    assert bidirectional.far is None
    buckets = t5_relative_bucket(-torch.arange(300), False, cfg.t5_num_buckets, cfg.t5_max_distance)
    assert causal.far == 113 and (buckets[113:] == cfg.t5_num_buckets - 1).all() and buckets[112] < buckets[113]
    assert causal.score_bias(200, 200).far == 113


@pytest.mark.parametrize("n_kv_heads", [None, 2])
@pytest.mark.parametrize("T", [5, 40])
def test_gpt_equals_the_dense_mask(monkeypatch, n_kv_heads, T):
    """MHA and GQA; T below the far distance (the block path) and above it; T5's table gradient is compared."""
    _blocks(monkeypatch, 7)
    calls = _spy(monkeypatch)
    ids = torch.randint(0, 50, (3, T))
    fast, dense = _both_paths(
        lambda b: GPT(_cfg("t5", b, n_kv_heads=n_kv_heads, **SMALL_T5)),
        lambda m: F.cross_entropy(m(ids).flatten(0, 1), ids.flatten()),
    )
    _assert_same(fast, dense, "t5")
    assert bool(calls) == (T > 10)  # the last of 8 causal buckets starts at distance 10


def test_encoder_decoder_equals_the_dense_mask(monkeypatch):
    """The decoder's causal self-attention splits; the padded bidirectional encoder keeps the block path."""
    _blocks(monkeypatch, 5)
    calls = _spy(monkeypatch)
    src, tgt = torch.randint(0, 50, (2, 17)), torch.randint(0, 50, (2, 23))
    src_mask = torch.ones(2, 17, dtype=torch.long)
    src_mask[0, 11:] = 0
    fast, dense = _both_paths(
        lambda b: EncoderDecoder(_cfg("t5", b, **SMALL_T5)), lambda m: m(src, tgt, src_mask).logsumexp(-1).mean()
    )
    _assert_same(fast, dense, "t5")
    assert calls


def test_kv_cache_decoding_equals_a_full_forward(monkeypatch):
    """The prompt splits; each cached step (an offset) keeps the block path."""
    monkeypatch.setattr(relative_bias, "QUERY_BLOCK", 4)
    _blocks(monkeypatch, 4)
    calls = _spy(monkeypatch)
    torch.manual_seed(0)
    fast, dense = GPT(_cfg("t5", "blockwise", **SMALL_T5)).eval(), GPT(_cfg("t5", "math", **SMALL_T5)).eval()
    dense.load_state_dict(fast.state_dict())
    prompt = torch.randint(0, 50, (2, 21))
    with torch.no_grad():
        cached = fast.generate(prompt, 6, temperature=0, use_cache=True)
        assert calls
        assert torch.equal(cached, dense.generate(prompt, 6, temperature=0, use_cache=True))
        assert torch.equal(cached, fast.generate(prompt, 6, temperature=0, use_cache=False))
        cache = fast.stack.new_cache(30)
        fast(prompt[:, :14], cache=cache)
        torch.testing.assert_close(fast(prompt[:, 14:], cache=cache), dense(prompt)[:, 14:], rtol=1e-5, atol=1e-5)
