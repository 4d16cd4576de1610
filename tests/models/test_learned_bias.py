"""The blockwise backward of a learned score bias gives the math kernel's gradients, without its state."""

import pytest
import torch
import torch.nn.functional as F

from models import GPT, ArchConfig, BertMLM, EncoderDecoder, learned_bias
from models.learned_bias import biased_attention


def _grads(model: torch.nn.Module, loss_of) -> dict[str, torch.Tensor]:
    model.zero_grad()
    loss_of(model).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _both_paths(build, loss_of) -> tuple[dict, dict]:
    """Gradients of the same weights with the blockwise and the math backward."""
    torch.manual_seed(0)
    fast = build("blockwise")
    math = build("math")
    math.load_state_dict(fast.state_dict())
    return _grads(fast, loss_of), _grads(math, loss_of)


def _assert_same(fast: dict, math: dict) -> None:
    assert fast.keys() == math.keys()
    assert any("pos.bias" in name for name in fast)  # the bias table really receives a gradient
    for name in fast:
        torch.testing.assert_close(fast[name], math[name], rtol=1e-4, atol=1e-5, msg=name)


def _cfg(backward: str, **kw) -> ArchConfig:
    sizes = {"vocab_size": 50, "d_model": 32, "n_layers": 2, "n_heads": 4}
    return ArchConfig(**sizes | {"pos_encoding": "t5", "bias_backward": backward} | kw)


@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_gpt_gradients_equal_math_kernel(monkeypatch, n_kv_heads):
    monkeypatch.setattr(learned_bias, "QUERY_BLOCK", 7)  # several blocks, the last one partial
    ids = torch.randint(0, 50, (3, 40))
    fast, math = _both_paths(
        lambda b: GPT(_cfg(b, n_kv_heads=n_kv_heads)), lambda m: F.cross_entropy(m(ids).flatten(0, 1), ids.flatten())
    )
    _assert_same(fast, math)


def test_bert_gradients_with_padding_equal_math_kernel(monkeypatch):
    monkeypatch.setattr(learned_bias, "QUERY_BLOCK", 8)
    ids = torch.randint(0, 50, (3, 30))
    mask = torch.ones(3, 30, dtype=torch.long)
    mask[1, 20:] = 0
    mask[2, 5:] = 0
    fast, math = _both_paths(lambda b: BertMLM(_cfg(b)), lambda m: (m(ids, mask) * mask[..., None]).square().mean())
    _assert_same(fast, math)


def test_encoder_decoder_gradients_equal_math_kernel(monkeypatch):
    monkeypatch.setattr(learned_bias, "QUERY_BLOCK", 5)
    src, tgt = torch.randint(0, 50, (2, 17)), torch.randint(0, 50, (2, 13))
    src_mask = torch.ones(2, 17, dtype=torch.long)
    src_mask[0, 11:] = 0
    fast, math = _both_paths(lambda b: EncoderDecoder(_cfg(b)), lambda m: m(src, tgt, src_mask).logsumexp(-1).mean())
    _assert_same(fast, math)


@pytest.mark.parametrize("offset", [0, 6])
def test_causal_rows_after_a_cache_offset(offset):
    """Queries i = 0..T-1 at positions offset + i see keys ≤ offset + i: the skipped keys are hidden."""
    torch.manual_seed(0)
    B, H, T, hd = 2, 3, 9, 8
    S = offset + T
    q = torch.randn(B, H, T, hd, requires_grad=True)
    k, v = (torch.randn(B, H, S, hd, requires_grad=True) for _ in range(2))
    bias = torch.randn(1, H, T, S, requires_grad=True)
    hidden = ~torch.ones(T, S, dtype=torch.bool).tril(offset)
    grad_out = torch.randn(B, H, T, hd)

    def grads(attend):
        out = attend(q, k, v, bias.masked_fill(hidden, float("-inf")))
        return out, torch.autograd.grad(out, (q, k, v, bias), grad_out)

    fast_out, fast = grads(lambda *a: biased_attention(*a, causal_offset=offset))
    ref_out, ref = grads(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m))
    torch.testing.assert_close(fast_out, ref_out)
    for a, b in zip(fast, ref):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert fast[3].masked_select(hidden).abs().max() == 0  # no gradient where a key is hidden


def test_blockwise_backward_keeps_no_full_score_tensor():
    """The math kernel saves (B, H, T, T) probabilities per layer; the blockwise path only its inputs."""
    torch.manual_seed(0)
    B, H, T, hd = 4, 4, 256, 16
    q, k, v = (torch.randn(B, H, T, hd, requires_grad=True) for _ in range(3))
    bias = torch.randn(1, H, T, T, requires_grad=True)

    def saved_bytes(attend) -> int:
        total = 0

        def pack(t: torch.Tensor):
            nonlocal total
            total += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            attend(q, k, v, bias)
        return total

    full = B * H * T * T * 4
    inputs_and_output = (4 * B * H * T * hd + H * T * T) * 4  # q, k, v, out and the shared bias
    assert saved_bytes(lambda *a: F.scaled_dot_product_attention(*a[:3], attn_mask=a[3])) >= full
    assert saved_bytes(biased_attention) == inputs_and_output


def test_dropout_in_training_uses_math_kernel():
    """The fused kernel's dropout mask cannot be replayed in the recomputation: SDPA decides."""
    model = GPT(_cfg("blockwise", dropout=0.1)).train()
    attn = model.stack.blocks[0].attn
    mask = torch.zeros(1, 4, 5, 5, requires_grad=True)
    assert not attn._blockwise_bias_grad(mask, dropout=0.1)
    assert attn._blockwise_bias_grad(mask, dropout=0.0)
    with torch.no_grad():
        assert not attn._blockwise_bias_grad(mask, dropout=0.0)  # evaluation: no backward to save for
