"""What every converter shares: the state dict under construction, one block's tensors, loading,
and the mapping of transformers' activation names."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..base import TransformerModel


class State(dict):
    """The suite model's state dict under construction. `bias` is the suite config's `bias`: block
    linears get the reference's bias, or zeros where the reference has none."""

    def __init__(self, bias: bool):
        super().__init__()
        self.bias = bias

    def linear(self, name: str, weight: Tensor, bias: Tensor | None = None) -> None:
        self[f"{name}.weight"] = weight
        if self.bias:
            self[f"{name}.bias"] = bias if bias is not None else weight.new_zeros(weight.shape[0])
        elif bias is not None:
            raise ValueError(f"{name}: the reference has a bias but the suite config has bias=False")

    def norm(self, name: str, module: nn.Module) -> None:
        self[f"{name}.weight"] = module.weight
        if getattr(module, "bias", None) is not None:
            self[f"{name}.bias"] = module.bias


def wb(linear: nn.Module) -> tuple[Tensor, Tensor | None]:
    return linear.weight, linear.bias


def cat_wb(*linears: nn.Module) -> tuple[Tensor, Tensor | None]:
    """Several nn.Linear stacked along the output rows (q;k;v or gate;up)."""
    weight = torch.cat([m.weight for m in linears])
    if all(m.bias is None for m in linears):
        return weight, None
    return weight, torch.cat([m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in linears])


def put_block(state: State, prefix: str, *, attn_norm, qkv, out, ffn_norm, up, down, cross=None) -> None:
    """One suite `Block`: norms are reference modules, projections (weight, bias) pairs; `cross`
    is (norm, q, kv, out) for a cross-attending block."""
    state.norm(f"{prefix}.attn_norm", attn_norm)
    state.linear(f"{prefix}.attn.qkv", *qkv)
    state.linear(f"{prefix}.attn.out", *out)
    if cross is not None:
        cross_norm, q, kv, cross_out = cross
        state.norm(f"{prefix}.cross_norm", cross_norm)
        state.linear(f"{prefix}.cross.q", *q)
        state.linear(f"{prefix}.cross.kv", *kv)
        state.linear(f"{prefix}.cross.out", *cross_out)
    state.norm(f"{prefix}.ffn_norm", ffn_norm)
    state.linear(f"{prefix}.ffn.up", *up)
    state.linear(f"{prefix}.ffn.down", *down)


def shared(a: Tensor, b: Tensor) -> bool:
    """Tied weights: the same storage."""
    return a.shape == b.shape and a.data_ptr() == b.data_ptr()


def load(model: TransformerModel, state: State, reference: nn.Module) -> TransformerModel:
    """Loads `state` strictly into `model`, moved to the reference's device and dtype; eval mode."""
    if model.cfg.tie_embeddings and "lm_head.weight" in model.state_dict():
        state["lm_head.weight"] = state["tok.weight"]
    ref_param = next(reference.parameters())
    model.to(device=ref_param.device, dtype=ref_param.dtype)
    model.load_state_dict(state, strict=True)
    return model.eval()


# transformers' ACT2FN names of GELU -> our `gelu_approximate` (all tanh variants are one formula)
HF_GELU = {
    "gelu": "none",
    "gelu_python": "none",
    "gelu_new": "tanh",
    "gelu_fast": "tanh",
    "gelu_accurate": "tanh",
    "gelu_pytorch_tanh": "tanh",
    "gelu_python_tanh": "tanh",
}


def hf_activation(name: str, gated: bool = False) -> dict:
    """A transformers activation name -> ArchConfig's `activation` and `gelu_approximate`."""
    if name in HF_GELU:
        return dict(activation="geglu" if gated else "gelu", gelu_approximate=HF_GELU[name])
    if name == "relu" and not gated:
        return dict(activation="relu")
    if name in ("silu", "swish") and gated:
        return dict(activation="swiglu")
    kind = "gated " if gated else ""
    raise ValueError(f"{kind}activation {name!r} has no suite equivalent (relu, gelu, swiglu, geglu)")


def unsupported(condition: bool, what: str) -> None:
    """Raises the converters' ValueError naming `what` when `condition` holds."""
    if condition:
        raise ValueError(f"cannot convert: {what} has no equivalent in the suite models")
