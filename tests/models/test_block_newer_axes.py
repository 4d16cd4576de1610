"""The newer axes, each its formula in the built model: Peri-LN's embedding norm and every norm placement,
DynamicTanh and its embedding gain, QK-norm, attention and logit soft-capping, RoPE on chosen layers; and all of
them together train in bf16 autocast."""

import math
from typing import get_args

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from models import GPT, ArchConfig, BertMLM, EncoderDecoder, ViT
from models.block import Block, StackContext
from models.config import NormPlacement
from models.norms import build_norm
from tests.models.block_cases import IDS, NORM_CLASSES, TINY, _gpt, _norm_modules


def _ctx() -> StackContext:
    return StackContext(mask=None, is_causal=True, rope=None, offset=0, memory=None, memory_mask=None, cache=None)


@pytest.mark.parametrize("placement", get_args(NormPlacement))
def test_peri_ln_normalises_its_embeddings_by_default(placement):
    """Kim et al. 2025's Peri-LN has y0 = Norm(x): the stream starts at unit RMS, level with the unit-RMS
    output each peri sublayer adds, where 0.02-scale embeddings would be drowned by the first block (Gemma 2
    instead scales them: `peri_embedding_norm: false`). Other placements keep the plain lookup; `embedding_norm` adds
    one under any placement."""
    model = _gpt(norm_placement=placement, init_std=0.02)
    assert isinstance(model.stack.embed_norm, nn.LayerNorm) == (placement == "peri")
    assert isinstance(_gpt(norm_placement=placement, peri_embedding_norm=False).stack.embed_norm, nn.Identity)
    assert isinstance(_gpt(norm_placement=placement, embedding_norm=True).stack.embed_norm, nn.LayerNorm)
    if placement != "peri":
        return

    def embedding_share(model: GPT) -> float:
        """RMS of the stream entering block 0 over the RMS block 0 adds to it."""
        seen = {}
        model.stack.blocks[0].register_forward_hook(lambda m, args, out: seen.update(x=args[0], out=out))
        model(IDS)
        return (seen["x"].pow(2).mean().sqrt() / (seen["out"] - seen["x"]).pow(2).mean().sqrt()).item()

    assert embedding_share(model) > 0.5
    assert embedding_share(_gpt(norm_placement="peri", init_std=0.02, peri_embedding_norm=False)) < 0.25


@pytest.mark.parametrize("placement", get_args(NormPlacement))
def test_each_placement_is_its_formula(placement):
    """pre x + f(n(x)), post n(x + f(x)), peri x + n'(f(n(x))) (Gemma 2, Peri-LN), reordered x + n(f(x)) (OLMo 2),
    for the attention and FFN sublayers of one block, from the block's own modules."""
    torch.manual_seed(0)
    block = Block(ArchConfig(**TINY, norm_placement=placement, norm="rmsnorm")).eval()
    for norm in _norm_modules(block):  # distinct norms, so that a swapped one shows
        nn.init.uniform_(norm.weight, 0.5, 1.5)
    x = torch.randn(2, 8, 32)
    attn = lambda h: block.attn(h, is_causal=True)  # noqa: E731
    formula = {
        "pre": lambda x, f, n, o: x + f(n(x)),
        "post": lambda x, f, n, o: n(x + f(x)),
        "peri": lambda x, f, n, o: x + o(f(n(x))),
        "reordered": lambda x, f, n, o: x + n(f(x)),
    }[placement]
    h = formula(x, attn, block.attn_norm, block.attn_out_norm)
    expected = formula(h, block.ffn, block.ffn_norm, block.ffn_out_norm)
    torch.testing.assert_close(block(x, _ctx(), 0), expected)


def test_dynamic_tanh_is_the_papers_equation_and_initialisation():
    """Zhu et al. 2025, Algorithm 1: DyT(x) = γ·tanh(αx) + β, α a learned scalar initialised to α0 (0.5 by
    default), γ ones and β zeros; the attention sublayers' norms take their own α0 where one is set (the
    paper's LLaMA recipe), the FFN's and the final norm take `dyt_alpha`."""
    cfg = ArchConfig(**TINY, norm="dyt", dyt_alpha=0.2, dyt_alpha_attention=0.8)
    layer = build_norm(cfg)
    assert layer.alpha.shape == (1,) and layer.alpha.item() == pytest.approx(0.2)
    assert torch.equal(layer.weight, torch.ones(32)) and torch.equal(layer.bias, torch.zeros(32))
    nn.init.normal_(layer.weight)
    nn.init.normal_(layer.bias)
    x = torch.randn(4, 32) * 5
    torch.testing.assert_close(layer(x), layer.weight * torch.tanh(0.2 * x) + layer.bias)
    model = _gpt(norm="dyt", dyt_alpha=0.2, dyt_alpha_attention=0.8, norm_placement="peri")
    for block in model.stack.blocks:
        assert block.attn_norm.alpha.item() == block.attn_out_norm.alpha.item() == pytest.approx(0.8)
        assert block.ffn_norm.alpha.item() == block.ffn_out_norm.alpha.item() == pytest.approx(0.2)
    assert model.stack.final_norm.alpha.item() == pytest.approx(0.2)
    assert _gpt(norm="dyt").stack.blocks[0].attn_norm.alpha.item() == pytest.approx(0.5)  # the paper's default α0
    assert "bias" not in dict(build_norm(ArchConfig(**TINY, norm="dyt", bias=False)).named_parameters())


@pytest.mark.parametrize("family", [GPT, BertMLM, EncoderDecoder])
def test_dynamic_tanh_token_models_learn_an_embedding_gain_from_sqrt_d(family):
    """DyT's LLaMA recipe (Zhu et al. 2025's released code, `shared(x) * shared_scale`): with `norm: dyt` the
    token lookup is multiplied by a learned scalar initialised to sqrt(d_model), the table at N(0, 1/d), so
    the embeddings start at unit RMS and the first DyT sees O(1) inputs, not 0.02-scale ones; the other norms
    keep the plain lookup, and the flag overrides either way."""
    dyt = family(ArchConfig(**TINY, norm="dyt"))
    gain = dyt.tok.gain
    assert gain.shape == (1,) and gain.item() == pytest.approx(math.sqrt(32))
    assert dyt.tok.weight.std().item() == pytest.approx(1 / math.sqrt(32), rel=0.15)
    ids = torch.randint(0, 64, (2, 8))
    out = dyt.tok(ids)
    torch.testing.assert_close(out, dyt.tok.weight[ids] * math.sqrt(32))
    out.square().sum().backward()
    assert gain.grad is not None and gain.grad.abs().item() > 0  # learned, not a constant
    assert family(ArchConfig(**TINY)).tok.gain is None
    assert family(ArchConfig(**TINY, norm="dyt", learn_embed_scale=False)).tok.gain is None
    assert family(ArchConfig(**TINY, learn_embed_scale=True)).tok.gain is not None
    # with sinusoids (a fixed sqrt(d) by default) the learned gain replaces the fixed factor, not stacks on it
    sinusoidal = family(ArchConfig(**TINY, norm="dyt", pos_encoding="sinusoidal")).tok
    assert sinusoidal.weight.std().item() == pytest.approx(1 / math.sqrt(32), rel=0.15)
    torch.testing.assert_close(sinusoidal(ids), sinusoidal.weight[ids] * sinusoidal.gain)
    assert family(ArchConfig(**TINY)).tok.weight.std().item() == pytest.approx(TINY["init_std"], rel=0.15)


@pytest.mark.parametrize("scope", ["projection", "head"])
@pytest.mark.parametrize("qk_norm", ["layernorm", "rmsnorm"])
def test_qk_norm_normalises_queries_and_keys_before_rope(scope, qk_norm):
    """OLMo 2 normalises the whole q and k projections, Qwen 3 each head's vector (one norm shared by the
    heads); both before RoPE, with GQA's fewer key heads."""
    torch.manual_seed(0)
    cfg = ArchConfig(**TINY, n_kv_heads=2, qk_norm=qk_norm, qk_norm_scope=scope, pos_encoding="rope")
    model = GPT(cfg).eval()
    attn = model.stack.blocks[0].attn
    norm_class = NORM_CLASSES[qk_norm]
    assert type(attn.q_norm) is norm_class and type(attn.k_norm) is norm_class
    width = {"projection": (32, 16), "head": (8, 8)}[scope]  # q: 4 heads × 8, k: 2 heads × 8
    assert (attn.q_norm.weight.shape[0], attn.k_norm.weight.shape[0]) == width
    for norm in (attn.q_norm, attn.k_norm):
        nn.init.uniform_(norm.weight, 0.5, 1.5)
    x = torch.randn(2, 8, 32)
    rope = model.stack.pos.rotary(8, 0)
    q, k, v = attn.qkv(x).split((32, 16, 16), dim=-1)

    def heads(t, n, norm=None):
        if norm is not None and scope == "projection":
            t = norm(t)
        t = t.view(2, 8, n, 8).transpose(1, 2)
        return norm(t) if norm is not None and scope == "head" else t

    from models.positional import apply_rotary

    q, k, v = heads(q, 4, attn.q_norm), heads(k, 2, attn.k_norm), heads(v, 2)
    if rope is not None:
        q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
    k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    expected = attn.out(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 8, 32))
    torch.testing.assert_close(attn(x, is_causal=True, rope=rope), expected)
    assert model.num_parameters() - GPT(ArchConfig(**TINY, n_kv_heads=2, pos_encoding="rope")).num_parameters() == (
        2 * sum(width) * (1 + (qk_norm == "layernorm"))  # 2 layers; LayerNorm has a bias too
    )


def test_attention_softcap_caps_every_score_before_the_mask():
    """c·tanh(s/c): a large cap is SDPA's attention, a tiny one leaves every visible key the same weight."""
    torch.manual_seed(0)
    x = torch.randn(2, 8, 32) * 4
    outputs = {}
    for cap in (None, 1e4, 1e-6):
        torch.manual_seed(0)
        attn = Block(ArchConfig(**TINY, attn_softcap=cap)).attn.eval()
        outputs[cap] = attn(x, is_causal=True)
    torch.testing.assert_close(outputs[1e4], outputs[None], rtol=1e-4, atol=1e-5)
    v = attn.qkv(x).split(32, dim=-1)[2].view(2, 8, 4, 8).transpose(1, 2)
    prefix_mean = v.cumsum(2) / torch.arange(1, 9).view(1, 1, 8, 1)  # query i: the mean of values 0..i
    torch.testing.assert_close(outputs[1e-6], attn.out(prefix_mean.transpose(1, 2).reshape(2, 8, 32)))


@pytest.mark.parametrize("family", ["gpt", "bert", "translation", "vit"])
def test_logit_softcap_bounds_every_familys_output(family):
    torch.manual_seed(0)
    build = {
        "gpt": lambda cfg: (GPT(cfg), (IDS,)),
        "bert": lambda cfg: (BertMLM(cfg), (IDS,)),
        "translation": lambda cfg: (EncoderDecoder(cfg), (IDS, IDS)),
        "vit": lambda cfg: (ViT(cfg, image_size=8, patch_size=4, num_classes=10), (torch.randn(2, 3, 8, 8),)),
    }[family]
    outputs = {}
    for cap in (None, 0.5):
        torch.manual_seed(0)
        model, inputs = build(ArchConfig(**TINY, logit_softcap=cap))
        outputs[cap] = model.eval()(*inputs)
    torch.testing.assert_close(outputs[0.5], 0.5 * torch.tanh(outputs[None] / 0.5))
    assert outputs[0.5].abs().max() < 0.5 < outputs[None].abs().max()


@pytest.mark.parametrize("field", ["attn_softcap", "logit_softcap"])
def test_a_softcap_must_be_positive(field):
    with pytest.raises(ValueError, match=f"{field}=0.0 must be positive or null"):
        ArchConfig(**TINY, **{field: 0.0})


def test_rope_layers_rotate_only_the_chosen_layers():
    """`rope_layers`: the named layers rotate their queries and keys, the others see no positions (NoPE);
    every layer named is the plain RoPE model."""
    torch.manual_seed(0)
    base = _gpt(pos_encoding="rope", n_layers=3)
    outputs = {}
    for layers in (None, (0, 1, 2), (0, 2), ()):
        model = _gpt(pos_encoding="rope", n_layers=3, rope_layers=layers)
        model.load_state_dict(base.state_dict())
        seen = []
        for i, block in enumerate(model.stack.blocks):
            block.attn.register_forward_pre_hook(
                lambda m, args, kwargs, i=i: seen.append((i, kwargs["rope"] is not None)), with_kwargs=True
            )
        outputs[layers] = model(IDS)
        assert seen == [(i, layers is None or i in layers) for i in range(3)]
    torch.testing.assert_close(outputs[(0, 1, 2)], outputs[None])
    assert not torch.allclose(outputs[(0, 2)], outputs[None]) and not torch.allclose(outputs[()], outputs[(0, 2)])


@pytest.mark.parametrize(
    "fields, message",
    [({"pos_encoding": "alibi", "rope_layers": (0,)}, "needs pos_encoding='rope'"),
     ({"pos_encoding": "rope", "rope_layers": (0, 2)}, r"layers are 0..1")],
)  # fmt: skip
def test_rope_layers_are_checked(fields, message):
    with pytest.raises(ValueError, match=message):
        ArchConfig(**TINY | fields)


# a per-head QK-norm gets the bf16 output of a Linear and keeps float weights: torch's unfused RMSNorm runs
@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight:UserWarning")
@pytest.mark.parametrize("family", ["gpt", "translation"])
def test_the_newer_axes_together_train_in_bf16_autocast(family):
    """QK-norm, peri norms of DyT, soft-capping and NoPE layers at once: a bf16-autocast step on CPU (the GPU
    configs' precision) gives finite gradients to every parameter."""
    torch.manual_seed(0)
    cfg = ArchConfig(**TINY | dict(pos_encoding="rope", rope_layers=(1,), qk_norm="rmsnorm", qk_norm_scope="head",
                                   norm="dyt", norm_placement="peri", attn_softcap=5.0, logit_softcap=3.0))  # fmt: skip
    model = GPT(cfg) if family == "gpt" else EncoderDecoder(cfg)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(IDS) if family == "gpt" else model(IDS, IDS)
        loss = F.cross_entropy(logits.float().flatten(0, 1), IDS.flatten())
    loss.backward()
    assert torch.isfinite(loss) and logits.abs().max() <= 3.0
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
