"""A µP or CompleteP model as the standard-parametrization (`sp`) model that computes the same function: its
forward multipliers (`models.parametrization`) folded into its weights (`to_standard`). This is how such a model
exports (`models.interop.to_reference`): no reference implementation has the multipliers.

Each multiplier scales a linear map's output, or an input that a linear map reads, so one weight takes it:
- the readout multiplier r (1/m_N, on the readout's input): the readout weight times r (its bias is not
  multiplied). A tied readout cannot take r without changing the token table, which the embedding reads: it is
  untied (`tie_embeddings=False`, the head r·table) unless the table takes the same factor;
- the attention scale a (1/d_head where SP's is 1/√d_head): the queries times a·√d_head, in the query rows of
  the projection (weight and bias), or with QK-norm in the query norm's gain and bias, which come after the
  projection (RoPE is linear: it commutes). An explicit `attn_scale` is the same in both: nothing to fold;
- the residual-branch multiplier c (CompleteP's 1/m_L of its stack): the last affine map of every branch times
  c (`BRANCH_OUTPUTS`): the output projections under `pre` and `post`, the output norm under `peri` and the
  norm under `reordered` (gain and bias; DyT's γ and β, not its α);
- a scaled token table's √base_width (SP's: √d_model): the table times √(base_width/d_model). A learned gain
  (DyT's recipe) is its learned value under every parametrization: nothing to fold.
Initialisation and the optimizer's groups are training, not the function: the SP model trains as SP would.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .attention import Attention
from .base import TokenEmbedding, TransformerModel
from .block import PLACEMENTS, Block
from .config import ArchConfig, NormPlacement

# norm_placement -> the module, in a `Block`, that ends each residual branch (self-attention, cross-attention,
# FFN) with an affine map: what the branch's multiplier folds into
BRANCH_OUTPUTS: dict[NormPlacement, tuple[str, str, str]] = {
    "pre": ("attn.out", "cross.out", "ffn.down"),
    "post": ("attn.out", "cross.out", "ffn.down"),
    "peri": ("attn_out_norm", "cross_out_norm", "ffn_out_norm"),
    "reordered": ("attn_norm", "cross_norm", "ffn_norm"),
}
assert set(BRANCH_OUTPUTS) == set(PLACEMENTS)


@dataclass(frozen=True)
class Fold:
    """What folding a model's multipliers does.

    Args:
        cfg: the SP model's config: the same architecture with `parametrization: sp`, untied where the readout
            multiplier needs it.
        readout: the readout multiplier folded into the head (1: none).
        table: the factor folded into the token table (1: none, or no table).
        reasons: a setting the fold changes or whose weights it changes -> why, for an export's refusal to say.
    """

    cfg: ArchConfig
    readout: float
    table: float
    reasons: dict[str, str]


def plan(model: TransformerModel) -> Fold:
    """The fold of `model` (its config and the global factors; the per-layer ones are read off the layers)."""
    cfg = model.cfg
    standard = replace(cfg, parametrization="sp", base_width=None, base_depth=None)
    readout = cfg.scheme.readout(cfg.width_mult)
    tok = getattr(model, "tok", None)
    table = cfg.embed_scale / standard.embed_scale if isinstance(tok, TokenEmbedding) and tok.gain is None else 1.0
    tied = tok is not None and getattr(model, model.readout_name).weight is tok.weight
    untie = tied and readout != table
    reasons = {}
    if readout != 1.0 and tok is not None:  # ViT has no token table to be tied to
        head = f"an {model.readout_name} untied from the token embedding" if untie else f"the {model.readout_name}"
        reasons["tie_embeddings"] = (
            f"parametrization={cfg.parametrization!r} multiplies the readout's input by 1/m_N = {readout:.6g}, "
            f"folded into {head}"
        )
    return Fold(replace(standard, tie_embeddings=False) if untie else standard, readout, table, reasons)


def to_standard(model: TransformerModel) -> TransformerModel:
    """The `sp` model computing `model`'s function (to float rounding): a new model of its class and task, on
    its device and dtype, in its mode; `model` itself when it is `sp` already. A plain model: merge LoRA first
    (`models.peft.merge_lora`)."""
    if model.cfg.parametrization == "sp":
        return model
    fold = plan(model)
    standard = model.rebuilt(fold.cfg)
    param = next(model.parameters())
    standard.to(device=param.device, dtype=param.dtype)
    state = {key: value.detach().clone() for key, value in model.state_dict().items()}
    # each key its own copy: a readout untied here takes its factor apart from the table's
    _scale(state, model.readout_name, fold.readout, bias=False)
    if fold.table != 1.0:
        _scale(state, "tok", fold.table)
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(module, Attention):
            _fold_attention(state, prefix, module, standard.get_submodule(name))
        elif isinstance(module, Block):
            _fold_residual(state, prefix, module, standard.get_submodule(name))
    standard.load_state_dict(state, strict=True)
    return standard.train(model.training)


def _score_scale(attention: Attention) -> float:
    return attention.head_dim**-0.5 if attention.scale is None else attention.scale


def _fold_attention(state: dict[str, Tensor], prefix: str, attention: Attention, standard: Attention) -> None:
    """The ratio of the two score scales into the queries: the query norm's affine map when there is one (it
    comes after the projection), else the query projection's rows."""
    factor = _score_scale(attention) / _score_scale(standard)
    if attention.q_norm is not None:
        _scale(state, f"{prefix}q_norm", factor)
    elif attention.cross:
        _scale(state, f"{prefix}q", factor)
    else:
        _scale(state, f"{prefix}qkv", factor, rows=attention.n_heads * attention.head_dim)


def _fold_residual(state: dict[str, Tensor], prefix: str, block: Block, standard: Block) -> None:
    """The ratio of the two residual multipliers into the affine map that ends each of the block's branches."""
    factor = block.residual_scale / standard.residual_scale
    branches = zip(BRANCH_OUTPUTS[block.placement], (block.attn, block.cross, block.ffn), strict=True)
    for output in (output for output, sublayer in branches if sublayer is not None):
        _scale(state, prefix + output, factor)


def _scale(state: dict[str, Tensor], module: str, factor: float, bias: bool = True, rows: int | None = None) -> None:
    """`module`'s weight (and bias, if it has one and `bias`) times `factor` in `state`, in place; only their
    first `rows` rows when given (the query rows of a fused projection)."""
    if factor == 1.0:
        return
    for key in (f"{module}.weight", f"{module}.bias") if bias else (f"{module}.weight",):
        if key in state:
            with torch.no_grad():
                (state[key] if rows is None else state[key][:rows]).mul_(factor)
        elif key.endswith(".weight"):  # a bug here, not a setting: every affine map has a weight
            raise KeyError(f"the fold scales {key}, which the model does not have")
