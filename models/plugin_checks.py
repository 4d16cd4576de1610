"""The interface check of a variant registered from outside the suite (`register_norm`, ...): built and run once
on a small input at registration, so a wrong constructor or forward is one line before any training."""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
from torch import Tensor, nn

from contract.errors import ConfigError


def variant_owner(obj: object) -> str:
    """The module that registers `obj`, as its file where it has one (a name registered twice by one module is no
    clash: the module was imported again)."""
    name = getattr(obj, "__module__", None) or repr(obj)
    return getattr(sys.modules.get(name), "__file__", None) or name


def probe_function(what: str, run: Callable[[Tensor], object], shape: tuple[int, ...]) -> None:
    """Runs `run` on a random tensor of `shape`; it must return a tensor of that shape.

    Raises:
        ConfigError: naming `what`, the failure and the interface expected.
    """
    x = torch.randn(shape)
    try:
        out = run(x)
    except Exception as err:  # the user's code: any failure is its interface's
        raise ConfigError(
            f"{what}: fails on a ({', '.join(map(str, shape))}) input: {type(err).__name__}: {err}"
        ) from err
    if not isinstance(out, Tensor) or tuple(out.shape) != shape:
        got = f"shape {tuple(out.shape)}" if isinstance(out, Tensor) else type(out).__name__
        raise ConfigError(f"{what}: must return a tensor of its input's shape {shape}, got {got}")


def probe_module(what: str, make: Callable[[], object], shape: tuple[int, ...]) -> None:
    """Builds a module with `make` (it must be an `nn.Module`) and runs it as `probe_function` does."""
    try:
        module = make()
    except Exception as err:
        raise ConfigError(f"{what}: cannot be built as (dim, cfg): {type(err).__name__}: {err}") from err
    if not isinstance(module, nn.Module):
        raise ConfigError(f"{what}: must build an nn.Module, got {type(module).__name__}")
    with torch.no_grad():
        probe_function(what, module, shape)
