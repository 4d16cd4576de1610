"""`model.arch.parametrization`: sp as before, µP and CompleteP's roles, init, multipliers and Adam groups."""

import math

import pytest
import torch

from lit_modules.optim import OptimConfig, build_optimizer
from models import GPT, ArchConfig, BertMLM, EncoderDecoder, ViT
from models.config import ConfigError
from models.parametrization import PARAMETRIZATIONS, ROLES, markdown_table

LM = dict(vocab_size=96, n_layers=2, n_heads=2, max_seq_len=16, pos_encoding="rope")


def gpt(d_model: int, seed: int = 0, **arch) -> GPT:
    torch.manual_seed(seed)
    return GPT(ArchConfig(**(LM | dict(d_model=d_model) | arch)))


def groups_by_parameter(model, lr=1e-2, eps=1e-8, weight_decay=0.1) -> dict[str, tuple[float, float, float]]:
    """parameter name -> (lr, eps, weight decay) of its AdamW group (before the schedule)."""
    optimizer, _ = build_optimizer(model, OptimConfig(lr=lr, eps=eps, weight_decay=weight_decay), total_steps=10)
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: (g["initial_lr"], g["eps"], g["weight_decay"]) for g in optimizer.param_groups
            for p in g["params"]}  # fmt: skip


def test_sp_is_every_factor_one():
    scheme = PARAMETRIZATIONS["sp"]
    for rule in scheme.roles.values():
        assert {f(4.0, 3.0) for f in (rule.init_std, rule.lr, rule.eps, rule.weight_decay)} == {1.0}
    assert scheme.readout(4.0) == scheme.residual(4.0, 3.0) == 1.0


@pytest.mark.parametrize("parametrization", ["mup", "completep"])
def test_at_its_base_shape_a_mup_model_is_the_sp_model(parametrization):
    """m_N = m_L = 1: the same weights from the same seed, the same logits and the same Adam groups (µP's attention
    scale is SP's at the base head width)."""
    sp, mup = gpt(64), gpt(64, parametrization=parametrization, base_width=64)
    assert mup.stack.blocks[0].attn.scale == pytest.approx(32**-0.5)  # d_head 32: SDPA's own 1/√d_head
    for (name, a), (_, b) in zip(sp.state_dict().items(), mup.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    ids = torch.randint(0, 96, (2, 16))
    assert torch.equal(sp(ids), mup(ids))
    assert groups_by_parameter(sp) == groups_by_parameter(mup)


def test_sp_model_keeps_its_optimizer_groups():
    """Two groups (decayed matrices, the rest), as before the parametrization axis existed."""
    optimizer, _ = build_optimizer(gpt(64), OptimConfig(), total_steps=10)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]


def test_mup_roles_of_every_family():
    tied, untied = gpt(64), gpt(64, tie_embeddings=False)
    roles = {n: tied.parameter_roles()[id(p)][0] for n, p in tied.named_parameters()}
    assert roles["tok.weight"] == "embedding"  # the tied readout is the token table
    assert roles["stack.blocks.0.attn.qkv.weight"] == roles["stack.blocks.1.ffn.down.weight"] == "hidden"
    assert roles["stack.blocks.0.attn_norm.weight"] == "block_vector"
    assert roles["stack.final_norm.weight"] == "vector"
    assert untied.parameter_roles()[id(untied.lm_head.weight)][0] == "readout"
    vit = ViT(ArchConfig(d_model=32, n_layers=1, n_heads=2), image_size=8, patch_size=4)
    vit_roles = {n: vit.parameter_roles()[id(p)][0] for n, p in vit.named_parameters()}
    assert (vit_roles["patch.weight"], vit_roles["cls"], vit_roles["head.weight"]) == ("embedding", "embedding",
                                                                                         "readout")  # fmt: skip
    bert = BertMLM(ArchConfig(**(LM | dict(d_model=32))))
    assert bert.parameter_roles()[id(bert.head_dense.weight)][0] == "hidden"
    assert bert.parameter_roles()[id(bert.lm_head.bias)][0] == "vector"
    assert set(r for r, _ in bert.parameter_roles().values()) <= set(ROLES)


def test_mup_scales_hidden_lr_eps_and_decay_by_width():
    model = gpt(256, parametrization="mup", base_width=64, tie_embeddings=False)  # m_N = 4
    groups = groups_by_parameter(model)
    assert groups["stack.blocks.0.attn.qkv.weight"] == pytest.approx((1e-2 / 4, 1e-8 / 4, 0.1 * 4))
    assert groups["stack.blocks.0.ffn.up.weight"] == pytest.approx((1e-2 / 4, 1e-8 / 4, 0.1 * 4))
    assert groups["tok.weight"] == pytest.approx((1e-2, 1e-8 / 4, 0.0))  # an input weight: its lr holds
    assert groups["lm_head.weight"] == pytest.approx((1e-2, 1e-8 / 4, 0.1))  # the readout: multiplied instead
    assert groups["stack.blocks.0.attn_norm.weight"] == pytest.approx((1e-2, 1e-8 / 4, 0.0))


def test_completep_scales_residual_branches_and_block_eps_by_depth():
    model = gpt(128, n_layers=8, parametrization="completep", base_width=64, base_depth=2)  # m_N = 2, m_L = 4
    assert {b.residual_scale for b in model.stack.blocks} == {0.25}
    groups = groups_by_parameter(model)
    assert groups["stack.blocks.3.attn.out.weight"] == pytest.approx((1e-2 / 2, 1e-8 / 8, 0.2))  # α = 1: lr has
    assert groups["stack.blocks.3.ffn_norm.weight"] == pytest.approx((1e-2, 1e-8 / 8, 0.0))  # no depth factor
    assert groups["stack.final_norm.weight"] == pytest.approx((1e-2, 1e-8 / 2, 0.0))
    # GPT-2's scaled init at the base depth: depth acts through the branch multiplier alone
    out = torch.cat([b.attn.out.weight.flatten() for b in model.stack.blocks])
    assert out.std().item() == pytest.approx(0.02 / math.sqrt(2) / math.sqrt(2 * 2), rel=0.05)


def test_encoder_decoder_stacks_take_their_own_depth_multiplier():
    cfg = ArchConfig(**(LM | dict(d_model=32, n_encoder_layers=4, n_decoder_layers=2)), parametrization="completep",
                     base_depth=2)  # fmt: skip
    model = EncoderDecoder(cfg)
    assert model.encoder.blocks[0].residual_scale == 0.5 and model.decoder.blocks[0].residual_scale == 1.0


def test_mup_hidden_init_shrinks_as_one_over_root_width_and_embeddings_hold():
    base, wide = gpt(64, parametrization="mup", base_width=64), gpt(256, parametrization="mup", base_width=64)
    for name in ("stack.blocks.0.attn.qkv.weight", "stack.blocks.1.ffn.up.weight"):
        ratio = wide.get_parameter(name).std() / base.get_parameter(name).std()
        assert ratio.item() == pytest.approx(0.5, rel=0.05), name
    assert wide.tok.weight.std().item() == pytest.approx(base.tok.weight.std().item(), rel=0.05)


def test_mup_readout_multiplier_and_attention_scale():
    model = gpt(256, parametrization="mup", base_width=64)
    h = torch.randn(3, 256)
    assert torch.allclose(model.readout_input(h), h / 4)
    assert model.stack.blocks[0].attn.scale == pytest.approx(32**0.5 / 128)  # √base_head_dim/d_head: 64/2, 256/2
    assert gpt(256).stack.blocks[0].attn.scale is None  # sp: SDPA's own 1/sqrt(d_head)


def test_mup_attention_scale_follows_the_head_width_not_the_model_width():
    """Widened by adding heads (head_dim fixed), µP's scores keep SP's scale at every width; widened by widening each
    head, they shrink as 1/d_head from SP's at the base head width."""
    for width in (64, 128, 256):
        more_heads = gpt(width, parametrization="mup", base_width=64, n_heads=width // 16, head_dim=16)
        assert more_heads.stack.blocks[0].attn.scale == pytest.approx(16**-0.5), width
        wider_heads = gpt(width, parametrization="mup", base_width=64, n_heads=4)
        assert wider_heads.stack.blocks[0].attn.scale == pytest.approx(16**0.5 / (width // 4)), width


def test_scaled_embeddings_keep_their_base_width_scale_under_mup():
    model = gpt(256, parametrization="mup", base_width=64, pos_encoding="sinusoidal")
    assert model.tok.scale == 8.0  # sqrt(base_width), not sqrt(256)
    assert model.tok.weight.std().item() == pytest.approx(64**-0.5, rel=0.05)


@pytest.mark.parametrize(
    ("arch", "message"),
    [
        (dict(base_width=64), "base_width=64 has no effect under parametrization='sp'"),
        (dict(parametrization="mup", base_depth=2), "set parametrization to 'completep'"),
        (dict(parametrization="mu-p"), "choose one of 'sp', 'mup', 'completep'"),
        (dict(parametrization="mup", base_width=0), "base_width=0 must be a positive integer"),
    ],
)
def test_config_errors_name_the_fix(arch, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ArchConfig(**(LM | dict(d_model=64) | arch))


def test_readme_prints_each_parametrizations_table():
    """The README's tables are `python -m models.parametrization`'s output, so they cannot drift from the code."""
    readme = open("README.md", encoding="utf-8").read()
    for name in PARAMETRIZATIONS:
        assert f"#### `{name}`\n\n{markdown_table(name)}\n" in readme, name


@pytest.mark.parametrize("method", ["lora", "adapter"])
def test_peft_on_a_mup_model_trains_its_adapters_at_the_base_lr(method):
    """PEFT's low-rank matrices do not grow with width: they keep η (the `adapter` role); the frozen base weights
    get no group at all."""
    from models.finetune import set_trainable
    from models.peft import PeftConfig

    model = gpt(128, parametrization="mup", base_width=64)
    set_trainable(model, PeftConfig(method=method))
    groups, roles = groups_by_parameter(model), model.parameter_roles()
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert set(groups) == trainable and {roles[id(model.get_parameter(n))][0] for n in trainable} == {"adapter"}
    assert {lr for lr, _, _ in groups.values()} == {1e-2}
