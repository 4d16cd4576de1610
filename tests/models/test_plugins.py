"""Variants registered from outside the suite (`models.plugins`): each axis's decorator makes its name a valid
value that builds and trains like a built-in one; a taken name, a wrong interface, a missing or failing module is a
one-line ConfigError naming it. Registration is per process: every test registers names of its own."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from contract.errors import ConfigError
from models import GPT, ArchConfig, BertMLM, EncoderDecoder, ViT, block, config, ffn, norms, positional
from models.block import register_placement
from models.config import AXES, BUILT_IN, REGISTERED
from models.ffn import FeedForward, register_activation
from models.interop import to_reference
from models.norms import build_norm, register_norm
from models.plugins import ACTIVE, load_plugins
from models.positional import PositionalScheme, register_positional

TINY = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=8)
IDS = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))
PLUGIN = """
import torch
from torch import nn
from models.norms import register_norm

@register_norm({name!r})
class Scaled(nn.Module):
    def __init__(self, dim, cfg):
        super().__init__()
        self.norm, self.scale = nn.RMSNorm(dim, eps=cfg.norm_eps), nn.Parameter(torch.full((1,), {scale}))

    def forward(self, x):
        return self.scale * self.norm(x)
"""


@pytest.fixture(autouse=True)
def registries():
    """Each test's registrations end with it: the other tests of the process see the built-in axes only."""
    tables = (REGISTERED, norms.NORMS, positional.POSITIONAL, config.POSITIONAL_FACTS, block.PLACEMENTS,
              ffn.REGISTERED_ACTIVATIONS)  # fmt: skip
    saved = [{k: dict(v) if isinstance(v, dict) else v for k, v in table.items()} for table in tables]
    literals = config.LITERALS, {alias: getattr(config, alias) for alias in AXES.values()}
    gated = set(config.GATED_ACTIVATIONS)
    yield
    config.GATED_ACTIVATIONS.intersection_update(gated)
    for table, before in zip(tables, saved, strict=True):
        table.clear()
        table.update(before)
    config.LITERALS = literals[0]
    for alias, literal in literals[1].items():
        setattr(config, alias, literal)
    ACTIVE.clear()


class HalfNorm(nn.Module):
    def __init__(self, dim: int, cfg: ArchConfig, scale: float = 0.5):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()


def test_a_registered_norm_is_a_valid_value_built_at_every_site_and_listed_in_errors():
    with pytest.raises(ConfigError, match="norm='half_norm' is not valid"):
        ArchConfig(norm="half_norm")
    register_norm("half_norm")(HalfNorm)
    cfg = ArchConfig(**TINY, norm="half_norm")
    assert isinstance(build_norm(cfg), HalfNorm)
    model = GPT(cfg)
    assert sum(isinstance(m, HalfNorm) for m in model.modules()) == 2 * 2 + 1  # two per block, the final norm
    assert model(IDS).shape == (2, 8, 64)
    with pytest.raises(ConfigError) as err:
        ArchConfig(norm="nope")
    listed = str(err.value).split("choose one of ")[1]
    assert listed.startswith(", ".join(map(repr, BUILT_IN["norm"]))) and "'half_norm'" in listed


def test_a_registered_norm_trains_in_every_family():
    register_norm("family_norm")(HalfNorm)
    cfg = ArchConfig(**TINY, norm="family_norm")
    outputs = {
        "bert": BertMLM(cfg)(IDS),
        "encoder-decoder": EncoderDecoder(cfg)(IDS, IDS),
        "vit": ViT(replace(cfg, pos_encoding="learned"), image_size=8, patch_size=4)(torch.randn(2, 3, 8, 8)),
    }
    for family, out in outputs.items():
        out.float().pow(2).mean().backward()
        assert torch.isfinite(out).all(), family
    assert any(isinstance(m, HalfNorm) for m in ViT(cfg, image_size=8, patch_size=4).modules())


def test_a_taken_name_is_refused_naming_who_holds_it():
    with pytest.raises(ConfigError, match=r"norm='rmsnorm' is taken by the suite \(built in\)"):
        register_norm("rmsnorm")(HalfNorm)
    register_norm("owned_norm")(HalfNorm)
    other = type("Other", (HalfNorm,), {"__module__": "someone_else"})
    with pytest.raises(ConfigError, match=f"norm='owned_norm' is taken by {__file__}"):
        register_norm("owned_norm")(other)
    assert REGISTERED["norm"]["owned_norm"] == __file__


@pytest.mark.parametrize(
    ("register", "variant", "message"),
    [
        (register_norm("bad_width"), lambda dim, cfg: nn.Linear(dim, dim // 2), r"must return a tensor of its input's "
         r"shape \(2, 3, 8\), got shape \(2, 3, 4\)"),
        (register_norm("bad_ctor"), lambda dim: nn.Identity(), "cannot be built as \\(dim, cfg\\): TypeError"),
        (register_norm("not_module"), lambda dim, cfg: torch.ones(dim), "must build an nn.Module, got Tensor"),
        (register_activation("bad_act"), lambda x: x.sum(), "must return a tensor of its input's shape"),
        (register_placement("bad_place"), lambda x, f: x, "fails on a \\(2, 3, 8\\) input: TypeError"),
        (register_positional("bad_pos"), object, "needs a subclass of models.positional.PositionalScheme"),
    ],
)  # fmt: skip
def test_a_wrong_interface_is_refused_at_registration_and_leaves_no_name(register, variant, message):
    with pytest.raises(ConfigError, match=message):
        register(variant)
    assert not any(name.startswith(("bad_", "not_")) for names in REGISTERED.values() for name in names)


def test_an_activation_a_placement_and_a_positional_scheme_train_in_a_gpt():
    register_activation("cube")(lambda x: x**3 / 3)
    register_placement("pre_half")(lambda x, f, norm, out_norm, branch: x + 0.5 * branch(f(norm(x))))

    @register_positional("offset_embed")
    class OffsetEmbed(PositionalScheme):
        def __init__(self, cfg, causal):
            super().__init__()
            self.shift = nn.Parameter(torch.zeros(cfg.d_model))

        def embed(self, x, offset=0):
            return x + self.shift

    for axis, name in (("activation", "cube"), ("norm_placement", "pre_half"), ("pos_encoding", "offset_embed")):
        torch.manual_seed(0)
        model = GPT(ArchConfig(**TINY, **{axis: name}))
        torch.manual_seed(0)
        base = GPT(ArchConfig(**TINY))
        loss = model(IDS).logsumexp(-1).mean()
        loss.backward()
        assert torch.isfinite(loss) and loss.item() != pytest.approx(base(IDS).logsumexp(-1).mean().item())
    assert isinstance(GPT(ArchConfig(**TINY, pos_encoding="offset_embed")).stack.pos, OffsetEmbed)


def test_export_refuses_a_plugin_variant_in_one_line():
    register_norm("export_norm")(HalfNorm)
    with pytest.raises(ValueError) as err:
        to_reference(GPT(ArchConfig(**TINY, norm="export_norm")))
    assert str(err.value) == (
        f"cannot export: norm='export_norm' (a plugin's, {__file__}) has no equivalent in any reference family"
    )


def test_a_plugin_file_loads_again_after_an_edit_with_its_new_hash(tmp_path):
    path = tmp_path / "scaled.py"
    path.write_text(PLUGIN.format(name="file_norm", scale=2.0))
    (first,) = load_plugins([str(path)])
    assert ACTIVE == [first] and first.path == str(path) and first.git_commit is None  # tmp_path: no git
    norm = build_norm(ArchConfig(norm="file_norm"))
    assert norm.scale.item() == 2.0
    path.write_text(PLUGIN.format(name="file_norm", scale=3.0))
    (second,) = load_plugins([str(path)])  # the same module again: no clash, the edit takes effect
    assert second.sha256 != first.sha256 and build_norm(ArchConfig(norm="file_norm")).scale.item() == 3.0


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (None, "plugins: {path}: no such file"),
        ("import not_a_module_anywhere\n", "plugins: {path} fails to import: ModuleNotFoundError: No module named"),
        ("raise RuntimeError('boom')\n", "plugins: {path} fails to import: RuntimeError: boom"),
        ("X = 1\n", "plugins: {path} registers no variant"),
        (PLUGIN.format(name="layernorm", scale=1.0), "plugins: {path}: norm='layernorm' is taken by the suite"),
    ],
)
def test_a_plugin_that_is_missing_fails_or_registers_nothing_is_one_line_naming_it(tmp_path, source, message):
    path = tmp_path / "plugin.py"
    if source is not None:
        path.write_text(source)
    with pytest.raises(ConfigError) as err:
        load_plugins([str(path)])
    assert str(err.value).startswith(message.format(path=path)) and "\n" not in str(err.value)


def test_a_module_name_that_is_not_there_is_one_line():
    with pytest.raises(ConfigError, match=r"^plugins: no_such_pkg\.norms: no such module"):
        load_plugins(["no_such_pkg.norms"])


def test_a_gated_plugin_activation_is_a_glu_at_the_gated_width():
    """`gated=True` builds the GLU form, down(act(gate(x)) * up(x)), parameter-matched like SwiGLU: a ReLU-gated
    plugin ("reglu", Shazeer 2020) has SwiGLU's shapes and computes relu(gate) * up."""
    register_activation("reglu", gated=True)(torch.relu)
    cfg = ArchConfig(**(TINY | {"activation": "reglu"}))
    ffn = FeedForward(cfg)
    swiglu = FeedForward(ArchConfig(**(TINY | {"activation": "swiglu"})))
    assert ffn.gated and ffn.up.weight.shape == swiglu.up.weight.shape
    x = torch.randn(2, 3, cfg.d_model)
    gate, up = ffn.up(x).chunk(2, dim=-1)
    torch.testing.assert_close(ffn(x), ffn.down(torch.relu(gate) * up))
