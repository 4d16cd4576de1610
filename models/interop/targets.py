"""The export registry's entry: a reference a suite model class exports to, and the `ArchConfig`
settings it can express, so `to_reference` picks the reference whose settings a model matches and
names every one that has no equivalent."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from torch import nn

from ..base import TransformerModel
from ..config import ArchConfig

Allowed = tuple | Callable[[ArchConfig], tuple]


def split_head_dim(cfg: ArchConfig) -> tuple:
    """The `head_dim` of a reference whose heads split d_model (GPT-2, BERT, BART, ...): unset, or d_model / n_heads."""
    return (None, cfg.d_model // cfg.n_heads) if cfg.d_model % cfg.n_heads == 0 else (None,)


def heads_dividing_d_model(cfg: ArchConfig) -> tuple:
    """The `n_heads` of a reference whose config requires them to divide hidden_size even with a head_dim of its own
    (transformers' LlamaConfig and Gemma2Config): this one if they do, else the nearest that do."""
    if cfg.d_model % cfg.n_heads == 0:
        return (cfg.n_heads,)
    divisors = [d for d in range(1, cfg.d_model + 1) if cfg.d_model % d == 0]
    return tuple(sorted(sorted(divisors, key=lambda d: abs(d - cfg.n_heads))[:2]))


def any_head_dim(cfg: ArchConfig) -> tuple:
    """The `head_dim` of a reference with a head width of its own (Llama's `head_dim`, T5's `d_kv`): any."""
    return (cfg.head_dim,)


# the axes no reference before them has, held at "off" for every target unless its `settings` allow more:
# a setting without weights (a softcap, NoPE layers) would otherwise export silently to a model without it
NEWER_AXES: dict[str, Allowed] = {
    "qk_norm": ("none",),
    "attn_softcap": (None,),
    "logit_softcap": (None,),
    "rope_layers": (None,),
    "learn_embed_scale": (None, False),  # None learns it with `norm: dyt`, which no target has either
    "head_dim": split_head_dim,  # a head width apart from d_model / n_heads: Llama's layout and T5 have one
}


@dataclass(frozen=True)
class Target:
    """A reference that suite models of class `suite` export to when their config has `settings`.

    Args:
        library: the reference, as errors name it ("transformers GPT2LMHeadModel").
        suite: the suite model class it exports.
        settings: `ArchConfig` field -> the values the reference can express (or a function of the
            config giving them); the fields not listed either map to any value or change training only,
            except `NEWER_AXES`, which are off unless listed.
        export: builds the reference from a suite model whose settings match.
        weights: the settings it expresses only with some weights (T5's untied head: the token table scaled), as
            a function of the model giving each setting it cannot express and what the reference has instead.
    """

    library: str
    suite: type[TransformerModel]
    settings: dict[str, Allowed]
    export: Callable[[TransformerModel], nn.Module]
    weights: Callable[[TransformerModel], dict[str, str]] = lambda model: {}

    def mismatches(self, model: TransformerModel, reasons: Mapping[str, str] = MappingProxyType({})) -> list[str]:
        """One phrase per setting of `model` that this reference cannot express; `reasons`: why a setting has its
        value, where the export set it (a folded parametrization's untied head, `models.parametrization_fold`)."""
        cfg, found = model.cfg, {}
        for name, allowed in (NEWER_AXES | self.settings).items():
            values = allowed(cfg) if callable(allowed) else allowed
            if getattr(cfg, name) not in values:
                found[name] = "it has " + " or ".join(repr(v) for v in values)
        found |= self.weights(model)
        return [
            f"{name}={getattr(cfg, name)!r}{f' ({reasons[name]})' if name in reasons else ''} has no equivalent in "
            f"{self.library} ({has})"
            for name, has in found.items()
        ]


def heads_shared_by_all(cfg: ArchConfig) -> tuple:
    """The `n_kv_heads` of plain multi-head attention."""
    return (None, cfg.n_heads)
