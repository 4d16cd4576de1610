"""How a model's initialisation, forward multipliers and per-parameter Adam settings scale with its width and
depth (`ArchConfig.parametrization`), as one table per parametrization. Torch-free: the CLI validates and the
README prints it (`python cli.py parametrization`) without building anything.

- `sp`: the standard parametrization, every factor 1 (today's models, bit for bit).
- `mup`: µP for Adam (Yang et al. 2022, Tensor Programs V, Table 3 in the form of its Table 8, which the
  `mup` package implements): hidden matrices start at std σ/√m_N and train at lr η/m_N (weight decay λ·m_N,
  so AdamW's decay lr·λ keeps its size, as `mup.MuAdamW` does); the readout's input is multiplied by 1/m_N;
  attention scores by 1/d_head instead of 1/√d_head (TP5 §8), times √(the base shape's head width), so that
  at the base shape µP is SP (TP5's GPT-3 runs: 8/d_head at a base head width of 64).
- `completep`: µP plus CompleteP's depth rules at α = 1 (Dey et al. 2025, Table 1): every residual branch is
  multiplied by 1/m_L, the scaled init of the projections that write to the residual stream uses the base depth,
  and Adam's ε of the blocks' parameters is ε/(m_N·m_L) (their Eq. 40; at α = 1 no learning rate moves with
  depth).

m_N = d_model / base_width and m_L = depth / base_depth (a stack's own depth); both are 1 at the base shape.
Adam's ε shrinks with width under both (ε/m_N: the gradients it is added to shrink as 1/width; CompleteP's
Eq. 40 and nanoGPT-mup's completep branch), which the `mup` package leaves at ε: the one difference from it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal, get_args

Parametrization = Literal["sp", "mup", "completep"]

# What a parameter is to the parametrization (`TransformerModel.parameter_roles` names each one):
# - embedding: an input weight (token and position tables, ViT's patch projection and CLS token): width is its
#   fan-out only, so its init and lr do not move;
# - hidden: a matrix whose fan-in and fan-out both grow with width (attention and FFN projections);
# - readout: the output projection (fan-in grows, fan-out is the vocabulary or classes), untied;
# - block_vector / vector: norms' gains and biases, other scalars, inside the blocks or outside them;
# - adapter: PEFT's LoRA and adapter matrices, whose rank does not grow: held at the base settings.
Role = Literal["embedding", "hidden", "readout", "block_vector", "vector", "adapter"]
ROLES: tuple[Role, ...] = get_args(Role)


@dataclass(frozen=True)
class Power:
    """The factor m_N**width · m_L**depth."""

    width: float = 0.0
    depth: float = 0.0

    def __call__(self, width_mult: float, depth_mult: float = 1.0) -> float:
        if not (self.width or self.depth):
            return 1.0  # exactly: `sp` multiplies by nothing
        return width_mult**self.width * depth_mult**self.depth

    def formula(self, base: str) -> str:
        """`base` times this factor, as the README's table writes it ("η·m_N^-1")."""
        terms = [f"m_{axis}{_exponent(p)}" for axis, p in (("N", self.width), ("L", self.depth)) if p]
        return "·".join(terms if base == "1" and terms else [base, *terms])


def _exponent(p: float) -> str:
    return {1: "", 0.5: "^1/2", -0.5: "^-1/2"}.get(p, f"^{p:g}")


ONE = Power()


@dataclass(frozen=True)
class RoleRule:
    """One role's factors on the base init std σ, learning rate η, Adam ε and weight decay λ."""

    init_std: Power = ONE
    lr: Power = ONE
    eps: Power = ONE
    weight_decay: Power = ONE


@dataclass(frozen=True)
class Scheme:
    """One parametrization: its per-role rules and its forward multipliers.

    Args:
        roles: each `Role`'s factors.
        readout: multiplies the readout's input (the logits' scale; the readout's bias is not scaled).
        residual: multiplies every residual branch's output (a stack's depth multiplier).
        attention_exponent: attention scores are q·k · base_head_dim**(this − 1/2) / d_head**this (1/2: Vaswani
            et al.'s 1/√d_head; 1: µP's, equal to it at the base head width), unless the config sets `attn_scale`.
        base_width_embeddings: a token table that is scaled up (`scale_embeddings`, DyT's learned gain) is scaled
            by √base_width instead of √d_model and starts at N(0, 1/base_width): an input weight whose values,
            and updates, keep their size as width grows.
        scaled_init_base_depth: GPT-2's scaled init σ/√(2·depth) uses the base depth, so that depth acts
            through `residual` alone.
    """

    roles: dict[Role, RoleRule]
    readout: Power = ONE
    residual: Power = ONE
    attention_exponent: float = 0.5
    base_width_embeddings: bool = False
    scaled_init_base_depth: bool = False


_MUP_ROLES: dict[Role, RoleRule] = {
    "embedding": RoleRule(eps=Power(-1)),
    "hidden": RoleRule(init_std=Power(-0.5), lr=Power(-1), eps=Power(-1), weight_decay=Power(1)),
    "readout": RoleRule(eps=Power(-1)),
    "block_vector": RoleRule(eps=Power(-1)),
    "vector": RoleRule(eps=Power(-1)),
    "adapter": RoleRule(),
}
_MUP = Scheme(roles=_MUP_ROLES, readout=Power(-1), attention_exponent=1.0, base_width_embeddings=True)

PARAMETRIZATIONS: dict[Parametrization, Scheme] = {
    "sp": Scheme(roles={role: RoleRule() for role in ROLES}),
    "mup": _MUP,
    "completep": Scheme(
        roles=_MUP_ROLES
        | {
            "hidden": RoleRule(init_std=Power(-0.5), lr=Power(-1), eps=Power(-1, -1), weight_decay=Power(1)),
            "block_vector": RoleRule(eps=Power(-1, -1)),
        },
        readout=Power(-1),
        residual=Power(0, -1),
        attention_exponent=1.0,
        base_width_embeddings=True,
        scaled_init_base_depth=True,
    ),
}
assert set(PARAMETRIZATIONS) == set(get_args(Parametrization))
assert all(set(s.roles) == set(ROLES) for s in PARAMETRIZATIONS.values())

_SYMBOLS = {"init_std": "σ", "lr": "η", "eps": "ε", "weight_decay": "λ"}


def markdown_table(name: Parametrization) -> str:
    """The table of `name` as the README prints it: a row per role, then the forward multipliers."""
    scheme = PARAMETRIZATIONS[name]
    header = "| role | init std | Adam lr | Adam ε | weight decay |\n|---|---|---|---|---|"
    rows = [
        f"| {role} | " + " | ".join(getattr(scheme.roles[role], f.name).formula(_SYMBOLS[f.name])
                                    for f in fields(RoleRule)) + " |"
        for role in ROLES
    ]  # fmt: skip
    exponent = scheme.attention_exponent
    attention = "1/√d_head" if exponent == 0.5 else f"√base_head_dim/d_head{_exponent(exponent)}"
    embed = "√base_width" if scheme.base_width_embeddings else "√d_model"
    multipliers = (
        f"Forward: readout input ×{scheme.readout.formula('1')}, residual branches ×{scheme.residual.formula('1')}, "
        f"attention scores ×{attention}, scaled token embeddings ×{embed}"
        + (", GPT-2's scaled init with the base depth." if scheme.scaled_init_base_depth else ".")
    )
    return "\n".join([header, *rows, "", multipliers])


def markdown_tables() -> str:
    """Every parametrization's table under its own heading: what `python cli.py parametrization` prints."""
    return "\n".join(f"#### `{name}`\n\n{markdown_table(name)}\n" for name in PARAMETRIZATIONS)
