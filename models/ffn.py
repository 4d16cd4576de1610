"""Position-wise feed-forward networks keyed by the `activation` axis."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch.nn.functional as F
from torch import Tensor, nn

from .config import GATED_ACTIVATIONS, Activation, ArchConfig, register_name
from .plugin_checks import probe_function, variant_owner

REGISTERED_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {}  # `register_activation`'s


def _activations(cfg: ArchConfig) -> dict[Activation, callable]:
    gelu = partial(F.gelu, approximate=cfg.gelu_approximate)
    return {"relu": F.relu, "gelu": gelu, "silu": F.silu, "swiglu": F.silu, "geglu": gelu, **REGISTERED_ACTIVATIONS}


def register_activation(name: str, gated: bool = False) -> Callable:
    """Decorator: registers an FFN activation from outside the suite (a plugin, `models.plugins`): an elementwise
    `(Tensor) -> Tensor` of the same shape, in the plain FFN down(act(up(x))), or with `gated` in the GLU form
    down(act(gate(x)) * up(x)) at the gated width, as SwiGLU and GeGLU; `name` is then a valid
    `model.arch.activation`. It is run once on a small input here: a wrong interface fails at registration."""

    def register(act: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
        probe_function(f"activation {name!r}", lambda x: act(x), (2, 3, 8))
        register_name("activation", name, variant_owner(act))
        REGISTERED_ACTIVATIONS[name] = act
        (GATED_ACTIVATIONS.add if gated else GATED_ACTIVATIONS.discard)(name)
        return act

    return register


class FeedForward(nn.Module):
    """down(act(up(x))), or down(act(gate(x)) * up(x)) for GLU variants (Shazeer 2020).

    The gate and up projections of GLU variants are one fused matrix (`up`, 2·d_ff outputs,
    gate first) so each layer runs two GEMMs whether gated or not.
    """

    def __init__(self, cfg: ArchConfig):
        super().__init__()
        self.gated = cfg.activation in GATED_ACTIVATIONS
        hidden = cfg.ffn_dim
        self.up = nn.Linear(cfg.d_model, 2 * hidden if self.gated else hidden, bias=cfg.bias)
        self.down = nn.Linear(hidden, cfg.d_model, bias=cfg.bias)
        self.act = _activations(cfg)[cfg.activation]
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        h = self.up(x)
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            h = self.act(gate) * up
        else:
            h = self.act(h)
        return self.down(self.drop(h))
