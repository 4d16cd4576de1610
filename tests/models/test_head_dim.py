"""A head width apart from d_model / n_heads (`ArchConfig.head_dim`), every family: the config's rules, the
projections' shapes and FLOPs, a training step, and KV-cache decoding equal to decoding without one."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from models import GPT, ArchConfig, BertMLM, EncoderDecoder, ViT
from models.config import ConfigError

# d 40 with 3 heads of 16 (48 wide, not a divisor of 40), grouped into 1 key head for the GQA cases
WIDE = dict(vocab_size=50, d_model=40, n_layers=2, n_heads=3, head_dim=16, max_seq_len=24, init_std=0.2)


def test_head_dim_is_its_own_setting():
    cfg = ArchConfig(**WIDE)
    assert cfg.d_head == 16 and cfg.head_dim == 16
    assert ArchConfig(d_model=64, n_heads=4).d_head == 16 and ArchConfig(d_model=64, n_heads=4).head_dim is None
    # unset, it follows d_model and n_heads: a width ladder over d_model keeps d / n_heads
    assert asdict(ArchConfig(d_model=64, n_heads=4))["head_dim"] is None
    assert replace(ArchConfig(d_model=64, n_heads=4), d_model=128).d_head == 32
    with pytest.raises(ConfigError, match="d_model=40 is not divisible by n_heads=3"):
        ArchConfig(**{**WIDE, "head_dim": None})
    with pytest.raises(ConfigError, match="head_dim=0 must be a positive integer"):
        ArchConfig(**{**WIDE, "head_dim": 0})
    with pytest.raises(ConfigError, match=r"even rotary dim, got head_dim\*rope_fraction=15; .*head_dim"):
        ArchConfig(**{**WIDE, "head_dim": 15}, pos_encoding="rope")
    assert ArchConfig(**WIDE, pos_encoding="rope", rope_fraction=0.25).rotary_dim == 4
    mup = ArchConfig(**WIDE, parametrization="mup", base_width=20)
    assert mup.attention_scale == 16**-0.5  # µP's: the head's own width (fixed: SP's), not d_model / n_heads
    assert replace(mup, head_dim=32).attention_scale == pytest.approx(32**-1.0 * 32**0.5)


def test_projections_and_flops_use_the_head_width():
    model = GPT(ArchConfig(**WIDE, n_kv_heads=1, qk_norm="rmsnorm", qk_norm_scope="head"))
    attn = model.stack.blocks[0].attn
    assert attn.qkv.weight.shape == (3 * 16 + 2 * 16, 40) and attn.out.weight.shape == (40, 48)
    assert attn.q_norm.weight.shape == (16,)
    projection = GPT(ArchConfig(**WIDE, qk_norm="rmsnorm")).stack.blocks[0].attn
    assert projection.q_norm.weight.shape == (48,) and projection.k_norm.weight.shape == (48,)
    linear = 2.0 * model.matmul_parameters()
    assert model.flops_per_token(24) - linear == 4.0 * 24 * 3 * 16 * 2 / 2  # QKᵀ and AV over 3·16, causal
    cross = EncoderDecoder(ArchConfig(**WIDE)).decoder.blocks[0].cross
    assert cross.q.weight.shape == (48, 40) and cross.kv.weight.shape == (96, 40) and cross.out.in_features == 48


FAMILIES = {
    "gpt": lambda cfg: GPT(cfg),
    "bert": lambda cfg: BertMLM(cfg),
    "enc-dec": lambda cfg: EncoderDecoder(cfg),
    "vit": lambda cfg: ViT(cfg, image_size=8, patch_size=2, num_classes=5),
}


def _loss(family: str, model, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if family == "vit":
        images, labels = torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)
        return F.cross_entropy(model(images), labels)
    ids = torch.randint(0, 50, (4, 12), generator=g)
    logits = model(ids, ids) if family == "enc-dec" else model(ids)
    return F.cross_entropy(logits.flatten(0, 1), ids.flatten())


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("pos", ["rope", "alibi"])
def test_every_family_trains_a_step_with_its_own_head_width(family, pos):
    """Every parameter gets a finite gradient, and one AdamW step lowers the loss on its batch."""
    if family == "vit":  # ViT has neither: its two tables instead
        pos = {"rope": "learned", "alibi": "sinusoidal"}[pos]
    torch.manual_seed(0)
    model = FAMILIES[family](ArchConfig(**WIDE, pos_encoding=pos, n_kv_heads=1, dropout=0.0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    before = _loss(family, model)
    before.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.isfinite().all()]
    assert missing == []
    optimizer.step()
    with torch.no_grad():
        assert _loss(family, model) < before


@pytest.mark.parametrize("pos", ["rope", "alibi", "learned", "t5"])
@pytest.mark.parametrize("n_kv_heads", [None, 1])
def test_gpt_cached_decoding_equals_uncached(pos, n_kv_heads):
    torch.manual_seed(0)
    model = GPT(ArchConfig(**WIDE, pos_encoding=pos, n_kv_heads=n_kv_heads, tie_embeddings=False)).eval()
    ids = torch.randint(0, 50, (2, 14), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(ids)
        cache = model.stack.new_cache(14)
        assert cache.self_attn[0].max_len == 14
        chunks = [ids[:, :5], *(ids[:, t : t + 1] for t in range(5, 14))]
        stepped = torch.cat([model(chunk, cache=cache) for chunk in chunks], dim=1)
        assert cache.self_attn[0].k.shape == (2, n_kv_heads or 3, 14, 16)  # the cache holds the heads' width
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=0)
    prompt = ids[:, :4]
    cached = model.generate(prompt, max_new_tokens=10, temperature=0, use_cache=True)
    assert torch.equal(cached, model.generate(prompt, max_new_tokens=10, temperature=0, use_cache=False))
    assert len(cached[:, 4:].unique()) > 1  # not one token repeated


@pytest.mark.parametrize("pos", ["rope", "t5"])
def test_encoder_decoder_cached_decoding_equals_uncached(pos):
    """Greedy decoding on the KV cache (self- and cross-attention) gives the tokens of the uncached loop."""
    torch.manual_seed(3)
    model = EncoderDecoder(ArchConfig(**WIDE, pos_encoding=pos, n_kv_heads=1, tie_embeddings=False)).eval()
    src = torch.randint(2, 50, (3, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 6 + [0]])
    out = model.greedy_decode(src, mask, bos_id=1, eos_id=-1, max_len=8)  # -1: never emitted, 8 steps
    tokens = torch.ones(3, 1, dtype=torch.long)
    with torch.no_grad():
        for _ in range(8):
            tokens = torch.cat((tokens, model(src, tokens, mask)[:, -1:].argmax(-1)), dim=1)
    assert torch.equal(out, tokens[:, 1:])
    assert len(out.unique()) > 1


def test_cli_takes_head_dim(tmp_path: Path):
    """`--model.arch.head_dim` reaches the built model."""
    from cli import cli_main

    configs = Path(__file__).resolve().parents[2] / "configs/gpt"
    args = ["-c", str(configs / "base.yaml"), "-c", str(configs / "tiny.yaml"), "--model.arch.head_dim", "24"]
    cli = cli_main([*args, "--trainer.fast_dev_run", "1", "--trainer.default_root_dir", str(tmp_path)], run=False)
    attn = cli.model.model.stack.blocks[0].attn
    assert cli.model.model.cfg.head_dim == 24 and attn.out.in_features == 24 * cli.model.model.cfg.n_heads
