"""GPT: causality and KV-cache decoding for every positional scheme."""

from typing import get_args

import pytest
import torch

from models import GPT, ArchConfig
from models.config import PosEncoding
from models.gpt import sample_next

TINY = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=16, init_std=0.1)
SCHEMES = get_args(PosEncoding)


def _gpt(pos: str, **kw) -> GPT:
    torch.manual_seed(0)
    return GPT(ArchConfig(**TINY, pos_encoding=pos, **kw)).eval()


def _ids(B: int, T: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 64, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("pos", SCHEMES)
def test_causality(pos):
    model = _gpt(pos)
    ids = _ids(2, 10)
    with torch.no_grad():
        base = model(ids)
        for t in range(9):
            changed = ids.clone()
            changed[:, t + 1] = (changed[:, t + 1] + 1) % 64
            out = model(changed)
            torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], atol=1e-6, rtol=0)
            assert not torch.allclose(out[:, t + 1], base[:, t + 1], atol=1e-4)  # the change is seen


@pytest.mark.parametrize("pos", SCHEMES)
@pytest.mark.parametrize("n_kv_heads", [None, 1])
def test_cached_step_logits_equal_full_forward(pos, n_kv_heads):
    model = _gpt(pos, n_kv_heads=n_kv_heads)
    ids = _ids(2, 14)
    with torch.no_grad():
        full = model(ids)
        cache = model.stack.new_cache(14)
        chunks = [ids[:, :5], ids[:, 5:8]] + [ids[:, t : t + 1] for t in range(8, 14)]  # prompt, chunk, steps
        stepped = torch.cat([model(chunk, cache=cache) for chunk in chunks], dim=1)
    assert cache.length == 14
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("pos", SCHEMES)
def test_generate_with_and_without_cache(pos):
    model = _gpt(pos, n_kv_heads=2, tie_embeddings=False)  # tied, a random model repeats its input
    prompt = _ids(3, 4)
    cached = model.generate(prompt, max_new_tokens=10, temperature=0, use_cache=True)
    uncached = model.generate(prompt, max_new_tokens=10, temperature=0, use_cache=False)
    assert cached.shape == (3, 14)
    assert torch.equal(cached[:, :4], prompt)
    assert torch.equal(cached, uncached)
    # greedy: each new token is the argmax of the full forward on what precedes it
    with torch.no_grad():
        logits = model(cached[:, :-1])
    assert torch.equal(logits[:, 3:].argmax(-1), cached[:, 4:])
    assert len(cached[0, 4:].unique()) > 1  # not a degenerate constant output


def test_sampling_is_reproducible_and_respects_top_k():
    model = _gpt("rope")
    prompt = _ids(2, 3)
    a = model.generate(prompt, 6, temperature=1.0, generator=torch.Generator().manual_seed(5))
    b = model.generate(prompt, 6, temperature=1.0, use_cache=False, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    logits = torch.randn(4, 64)
    top = logits.topk(3).indices
    for seed in range(20):
        token = sample_next(logits, 1.0, top_k=3, generator=torch.Generator().manual_seed(seed))
        assert (token == top).any(-1).all()
    assert torch.equal(sample_next(logits, 0, None), logits.argmax(-1, keepdim=True))
