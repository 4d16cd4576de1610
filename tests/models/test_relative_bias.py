"""ALiBi's and T5's score bias kept per distance and applied per block of queries (`models.relative_bias`)
gives the dense mask's outputs and gradients, for every family and the KV cache, without a T×T tensor."""

import pytest
import torch
import torch.nn.functional as F

from models import GPT, ArchConfig, BertMLM, EncoderDecoder, relative_bias
from models.relative_bias import RelativeBias, ScoreMask, bias_attention, flex_bias_attention

SCHEMES = ["t5", "alibi"]


def _grads(model: torch.nn.Module, loss_of) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    loss = loss_of(model)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _both_paths(build, loss_of):
    """Loss and gradients of the same weights with the blockwise path and the dense mask."""
    torch.manual_seed(0)
    fast = build("blockwise")
    dense = build("math")
    dense.load_state_dict(fast.state_dict())
    return _grads(fast, loss_of), _grads(dense, loss_of)


def _assert_same(fast, dense, scheme: str) -> None:
    (fast_loss, fast), (dense_loss, dense) = fast, dense
    torch.testing.assert_close(fast_loss, dense_loss, rtol=1e-5, atol=1e-6)
    assert fast.keys() == dense.keys()
    assert any("pos.bias" in name for name in fast) == (scheme == "t5")  # T5's table receives a gradient
    for name in fast:
        torch.testing.assert_close(fast[name], dense[name], rtol=1e-4, atol=1e-5, msg=name)


def _cfg(scheme: str, backward: str, **kw) -> ArchConfig:
    sizes = {"vocab_size": 50, "d_model": 32, "n_layers": 2, "n_heads": 4}
    return ArchConfig(**sizes | {"pos_encoding": scheme, "bias_backward": backward} | kw)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_gpt_equals_the_dense_mask(monkeypatch, scheme, n_kv_heads):
    monkeypatch.setattr(relative_bias, "QUERY_BLOCK", 7)  # several blocks, the last one partial
    ids = torch.randint(0, 50, (3, 40))
    fast, dense = _both_paths(
        lambda b: GPT(_cfg(scheme, b, n_kv_heads=n_kv_heads)),
        lambda m: F.cross_entropy(m(ids).flatten(0, 1), ids.flatten()),
    )
    _assert_same(fast, dense, scheme)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_bert_with_padding_equals_the_dense_mask(monkeypatch, scheme):
    monkeypatch.setattr(relative_bias, "QUERY_BLOCK", 8)
    ids = torch.randint(0, 50, (3, 30))
    mask = torch.ones(3, 30, dtype=torch.long)
    mask[1, 20:] = 0
    mask[2, 5:] = 0
    fast, dense = _both_paths(
        lambda b: BertMLM(_cfg(scheme, b)), lambda m: (m(ids, mask) * mask[..., None]).square().mean()
    )
    _assert_same(fast, dense, scheme)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_encoder_decoder_equals_the_dense_mask(monkeypatch, scheme):
    monkeypatch.setattr(relative_bias, "QUERY_BLOCK", 5)
    src, tgt = torch.randint(0, 50, (2, 17)), torch.randint(0, 50, (2, 13))
    src_mask = torch.ones(2, 17, dtype=torch.long)
    src_mask[0, 11:] = 0
    fast, dense = _both_paths(
        lambda b: EncoderDecoder(_cfg(scheme, b)), lambda m: m(src, tgt, src_mask).logsumexp(-1).mean()
    )
    _assert_same(fast, dense, scheme)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_kv_cache_decoding_equals_the_dense_mask_and_a_full_forward(monkeypatch, scheme):
    monkeypatch.setattr(relative_bias, "QUERY_BLOCK", 4)
    torch.manual_seed(0)
    fast, dense = GPT(_cfg(scheme, "blockwise")).eval(), GPT(_cfg(scheme, "math")).eval()
    dense.load_state_dict(fast.state_dict())
    prompt = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        cached = fast.generate(prompt, 6, temperature=0, use_cache=True)
        assert torch.equal(cached, dense.generate(prompt, 6, temperature=0, use_cache=True))
        assert torch.equal(cached, fast.generate(prompt, 6, temperature=0, use_cache=False))
        # a chunk of several queries after a cached prefix: causal rows at an offset
        cache = fast.stack.new_cache(20)
        fast(prompt[:, :5], cache=cache)
        torch.testing.assert_close(fast(prompt[:, 5:], cache=cache), dense(prompt)[:, 5:], rtol=1e-5, atol=1e-5)


def _random_mask(H: int, T: int, S: int, offset: int | None, padded: bool, requires_grad: bool) -> ScoreMask:
    per_distance = torch.randn(H, T + S - 1, requires_grad=requires_grad)
    padding = None
    if padded:
        keep = torch.ones(2, S, dtype=torch.bool)
        keep[1, S // 2 :] = False
        padding = torch.zeros(2, S).masked_fill(~keep, float("-inf"))[:, None, None, :]
    return ScoreMask(RelativeBias(per_distance, T, S), padding, offset)


@pytest.mark.parametrize("offset, padded", [(None, False), (None, True), (0, False), (6, True)])
def test_block_function_equals_sdpa_with_the_dense_mask(monkeypatch, offset, padded):
    """Outputs and the gradients of q, k, v and the per-distance table, at any offset, with padding."""
    monkeypatch.setattr(relative_bias, "QUERY_BLOCK", 4)
    torch.manual_seed(0)
    B, H, T, hd = 2, 3, 9, 8
    S = T + (offset or 0)
    q = torch.randn(B, H, T, hd, requires_grad=True)
    k, v = (torch.randn(B, H, S, hd, requires_grad=True) for _ in range(2))
    mask = _random_mask(H, T, S, offset, padded, requires_grad=True)
    grad_out = torch.randn(B, H, T, hd)
    inputs = (q, k, v, mask.bias.per_distance)

    out = bias_attention(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.dense(torch.float32))
    torch.testing.assert_close(out, ref)
    for a, b in zip(torch.autograd.grad(out, inputs, grad_out), torch.autograd.grad(ref, inputs, grad_out)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_the_mask_of_a_block_is_the_dense_masks_rows():
    mask = _random_mask(3, 9, 15, offset=6, padded=True, requires_grad=False)
    dense = mask.dense(torch.float32)
    assert dense.shape == (2, 3, 9, 15)
    block = mask.reversed_block(mask.table(torch.float32), 4, 8, 14)  # queries 7, 6, 5, 4
    assert torch.equal(block, dense[..., 4:8, :14].flip(-2))
    bias = mask.bias.dense()  # bias[h, i, j] = per_distance[h, j - i + T - 1]
    assert bias[1, 2, 7] == mask.bias.per_distance[1, 7 - 2 + 8] and bias[0, 8, 0] == mask.bias.per_distance[0, 0]


def test_blockwise_attention_keeps_no_full_score_tensor():
    """The dense mask costs (B|1, H, T, T) floats, saved for the backward; the blockwise path saves its
    inputs, its output and the per-distance table only."""
    torch.manual_seed(0)
    B, H, T, hd = 4, 4, 256, 16
    q, k, v = (torch.randn(B, H, T, hd, requires_grad=True) for _ in range(3))
    mask = ScoreMask(RelativeBias(torch.randn(H, 2 * T - 1, requires_grad=True), T, T), None, 0)

    def saved_bytes(attend) -> int:
        total = 0

        def pack(t: torch.Tensor):
            nonlocal total
            total += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            attend()
        return total

    full = H * T * T * 4
    assert saved_bytes(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask.dense(q.dtype))) >= full
    assert saved_bytes(lambda: bias_attention(q, k, v, mask)) == (4 * B * H * T * hd + H * (2 * T - 1)) * 4


@pytest.mark.filterwarnings("ignore:.*flex_attention.*compile:UserWarning")  # uncompiled is slow: it is small here
@pytest.mark.parametrize("offset, padded", [(None, True), (0, False), (6, True)])
def test_flex_attention_path_equals_the_dense_mask(offset, padded):
    """The CUDA path's score_mod and block mask, run uncompiled on CPU (forward only: flex has no CPU
    backward; the GPU check compares its gradients on a GPU)."""
    torch.manual_seed(0)
    B, H, T, hd = 2, 4, 16, 16
    S = T + (offset or 0)
    q, k, v = torch.randn(B, H, T, hd), torch.randn(B, H, S, hd), torch.randn(B, H, S, hd)
    mask = _random_mask(H, T, S, offset, padded, requires_grad=False)
    out = flex_bias_attention(q, k, v, mask, scale=None, compiled=False)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.dense(torch.float32))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_dropout_in_training_uses_the_dense_mask():
    """The fused kernel's dropout mask cannot be replayed in the recomputation: SDPA's kernels decide."""
    model = GPT(_cfg("t5", "blockwise", dropout=0.1)).train()
    attn = model.stack.blocks[0].attn
    mask = _random_mask(4, 5, 5, offset=0, padded=False, requires_grad=True)
    assert not attn._blockwise(mask, dropout=0.1)
    assert attn._blockwise(mask, dropout=0.0)
    assert not GPT(_cfg("t5", "math")).stack.blocks[0].attn._blockwise(mask, dropout=0.0)


@pytest.mark.parametrize("T", [9, 1024])
def test_causal_alibi_rides_inside_q_k_as_sdpas_causal_kernel(monkeypatch, T):
    """ALiBi over causal rows is m·j once each row's constant is dropped: one more feature of q and k, SDPA's
    causal kernel, the dense mask's outputs and gradients (at T = 1,024 too, where m·T/2 is added to a score)."""
    from models.positional import alibi_slopes

    torch.manual_seed(0)
    B, H, hd = 2, 4, 16
    q, k, v = (torch.randn(B, H, T, hd, requires_grad=True) for _ in range(3))
    slopes = alibi_slopes(H)
    distance = torch.arange(2 * T - 1) - (T - 1)
    mask = ScoreMask(RelativeBias(-slopes[:, None] * distance.abs().float(), T, T, slopes=slopes), None, 0)
    calls = []
    monkeypatch.setattr(relative_bias._BlockwiseBiasAttention, "apply", lambda *a: calls.append(a))
    out = bias_attention(q, k, v, mask)
    assert not calls  # not the per-block path
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.dense(torch.float32))
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    grad_out = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), grad_out), torch.autograd.grad(ref, (q, k, v), grad_out)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "offset, padded, dtype, causal_alibi",
    [(0, False, torch.float32, False), (0, True, torch.float32, True), (6, False, torch.float32, True),
     (0, False, torch.bfloat16, True)],
)  # fmt: skip
def test_only_unpadded_causal_alibi_in_float_is_folded(offset, padded, dtype, causal_alibi):
    """Padding, a KV cache's offset, a bidirectional bias or a half precision (m·T/2 would round away q·k)
    keep the per-block path."""
    mask = _random_mask(4, 9, 9 + offset, offset, padded, requires_grad=False)
    if causal_alibi:
        mask = ScoreMask(RelativeBias(mask.bias.per_distance, 9, 9 + offset, slopes=torch.ones(4)), mask.padding,
                         offset)  # fmt: skip
    assert not relative_bias._foldable(torch.zeros(1, dtype=dtype), mask)
    folded = ScoreMask(RelativeBias(mask.bias.per_distance[:, :17], 9, 9, slopes=torch.ones(4)), None, 0)
    assert relative_bias._foldable(torch.zeros(1), folded)
