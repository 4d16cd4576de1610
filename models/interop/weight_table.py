"""A family's weight table and the transfer that reads it in either direction.

A family's table is one list of `Pair`s, each a suite state-dict key, the reference key(s) it is
made of and a `Transform` with both directions, so `from_reference` and `to_reference` read the
same mapping. `transfer` applies a table, loads the result strictly and checks that every source
tensor was read, so a tensor that is missing, left over or mis-shaped is an error, not a silent
random init or a dropped weight. A reference tensor that the suite computes instead of storing
(Marian's sinusoidal tables) is a `Computed` entry: checked when converting, written when exporting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..base import TransformerModel


@dataclass(frozen=True)
class Transform:
    """How reference tensors become one suite tensor (`to_suite`) and the inverse (`to_ref`)."""

    to_suite: Callable[..., Tensor]
    to_ref: Callable[[Tensor], tuple[Tensor, ...]]


IDENTITY = Transform(lambda t: t, lambda t: (t,))
TRANSPOSED = Transform(lambda t: t.t(), lambda t: (t.t(),))


def stacked(*rows: int) -> Transform:
    """Reference tensors of `rows` rows each, stacked into one suite tensor (q;k;v or gate;up)."""
    return Transform(lambda *ts: torch.cat(ts), lambda t: tuple(t.split(rows)))


def scaled(factor: float) -> Transform:
    return Transform(lambda t: t * factor, lambda t: (t / factor,))


@dataclass(frozen=True)
class Pair:
    """One suite tensor and the reference tensors it is made of. `optional` marks biases: one side
    may have none, which is a zero bias."""

    suite: str
    ref: tuple[str, ...]
    transform: Transform = IDENTITY
    optional: bool = False


@dataclass(frozen=True)
class Ref:
    """The reference module(s) holding one suite module's weight and bias, and their transforms
    (the bias's defaults to the weight's)."""

    names: tuple[str, ...]
    weight: Transform = IDENTITY
    bias: Transform | None = None


@dataclass(frozen=True)
class Computed:
    """A reference tensor the suite computes rather than stores: converting checks that the reference's
    is `make(rows)` (to float rounding), exporting writes `make(rows)`. `what` names it in errors."""

    ref: str
    make: Callable[[int], Tensor]
    what: str


COMPUTED_ATOL = 1e-6  # a table computed in another precision or order differs by float rounding only


def tensor(suite: str, ref: str, transform: Transform = IDENTITY) -> list[Pair]:
    return [Pair(suite, (ref,), transform)]


def module(suite: str, source: Ref | str) -> list[Pair]:
    """The weight and (optional) bias of the suite module `suite` (a linear or a norm)."""
    ref = Ref((source,)) if isinstance(source, str) else source
    return [
        Pair(f"{suite}.weight", tuple(f"{n}.weight" for n in ref.names), ref.weight),
        Pair(f"{suite}.bias", tuple(f"{n}.bias" for n in ref.names), ref.bias or ref.weight, optional=True),
    ]


# the modules of one suite `Block`, by the keyword `block` takes them under
BLOCK_MODULES = {
    "attn_norm": "attn_norm",
    "qkv": "attn.qkv",
    "q_norm": "attn.q_norm",
    "k_norm": "attn.k_norm",
    "out": "attn.out",
    "cross_norm": "cross_norm",
    "cross_q": "cross.q",
    "cross_kv": "cross.kv",
    "cross_out": "cross.out",
    "attn_out_norm": "attn_out_norm",
    "cross_out_norm": "cross_out_norm",
    "ffn_norm": "ffn_norm",
    "ffn_out_norm": "ffn_out_norm",
    "up": "ffn.up",
    "down": "ffn.down",
}


def block(prefix: str, **sources: Ref | str) -> list[Pair]:
    """One suite `Block` at `prefix`: each keyword of `BLOCK_MODULES` names its reference module(s)."""
    return [pair for name, source in sources.items() for pair in module(f"{prefix}.{BLOCK_MODULES[name]}", source)]


def _aliases(model: nn.Module) -> dict[str, list[str]]:
    """Each state-dict key -> every key holding the same tensor (tied weights), in state-dict order."""
    groups: dict[int, list[str]] = {}
    state = model.state_dict(keep_vars=True)
    for key, value in state.items():
        groups.setdefault(id(value), []).append(key)
    return {key: groups[id(value)] for key, value in state.items()}


def _check_computed(entry: Computed, given: Tensor, what: str) -> None:
    """Raises naming `entry` when the reference's tensor is not the one the suite computes."""
    expected = entry.make(given.shape[0]).to(given)
    diff = (given - expected).abs().max().item() if given.shape == expected.shape else float("inf")
    if diff > COMPUTED_ATOL:
        raise ValueError(
            f"cannot {what}: {entry.ref} is not {entry.what}, which the suite computes instead of storing "
            f"(max abs diff {diff:.3g}); only a reference whose table is unchanged converts"
        )


def transfer(pairs: list[Pair | Computed], source: nn.Module, dest: nn.Module, to_suite: bool, what: str) -> None:
    """Fills `dest` from `source` through `pairs` (reference -> suite when `to_suite`, else back)
    and loads it strictly. `what` names the direction in errors ("convert", "export to ...")."""
    src = {key: value.detach() for key, value in source.state_dict(keep_vars=True).items()}
    src_aliases, target = _aliases(source), dest.state_dict()
    out: dict[str, Tensor] = {}
    read: set[str] = set()
    for pair in pairs:
        if isinstance(pair, Computed):
            if to_suite:
                _check_computed(pair, src[pair.ref], what)
                read.update(src_aliases[pair.ref])
            else:
                out[pair.ref] = pair.make(target[pair.ref].shape[0])
            continue
        src_keys, dst_keys = (pair.ref, (pair.suite,)) if to_suite else ((pair.suite,), pair.ref)
        if pair.optional and not any(key in src for key in src_keys):
            out.update({key: torch.zeros_like(target[key]) for key in dst_keys if key in target})
            continue
        missing = [key for key in src_keys if key not in src]
        if missing:  # a table that does not fit the model it was built for: a bug here, not a setting
            raise KeyError(f"{what}: the weight table names {missing}, which the source model does not have")
        tensors = [src[key] for key in src_keys]
        values = (pair.transform.to_suite(*tensors),) if to_suite else pair.transform.to_ref(*tensors)
        for key, value in zip(dst_keys, values, strict=True):
            if key in target:
                out[key] = value
            elif value.any():  # a zero bias is no bias; any other tensor must have a place
                raise ValueError(f"cannot {what}: {', '.join(src_keys)} is not zero but has no equivalent ({key})")
        read.update(alias for key in src_keys for alias in src_aliases[key])
    unread = [key for key in src if key not in read]
    if unread:
        raise ValueError(f"cannot {what}: the weight table leaves {', '.join(unread)} unread (no equivalent)")
    for key, tied in _aliases(dest).items():  # a tied copy takes its first name's value
        if tied[0] in out:
            out[key] = out[tied[0]]
    param = next(source.parameters())
    dest.to(device=param.device, dtype=param.dtype)
    dest.load_state_dict(out, strict=True)
    dest.eval()


def load(model: TransformerModel, reference: nn.Module, pairs: list[Pair | Computed]) -> TransformerModel:
    """The suite `model` filled from `reference` through `pairs`, on its device and dtype, in eval mode."""
    transfer(pairs, reference, model, to_suite=True, what="convert")
    return model


def export(reference: nn.Module, model: TransformerModel, pairs: list[Pair | Computed]) -> nn.Module:
    """The new `reference` filled from the suite `model` through `pairs`, on its device and dtype, in eval mode."""
    transfer(pairs, model, reference, to_suite=False, what=f"export to {type(reference).__name__}")
    return reference


def nonzero(model: nn.Module, *suffixes: str) -> bool:
    """Whether any parameter named with one of `suffixes` is non-zero (a reference's bias flag)."""
    return any(p.any() for name, p in model.named_parameters() if name.endswith(suffixes))


def shared(a: Tensor, b: Tensor) -> bool:
    """Tied weights: the same storage."""
    return a.shape == b.shape and a.data_ptr() == b.data_ptr()
