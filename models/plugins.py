"""Variants from outside the suite: plugin modules that register a norm, positional scheme, FFN activation or
norm placement on an existing axis (`models.norms.register_norm`, `models.positional.register_positional`,
`models.ffn.register_activation`, `models.block.register_placement`).

A run names them with `--plugins PATH` (a list: `--plugins [a.py,b.py]`; a file, or an importable module's
dotted name) or `plugins:` in a config file or a sweep spec; `cli.py` imports them before its parser is built,
so a registered name is a valid value of its flag, in every process the run starts (DDP re-runs the command
line) and on resume (the run's `config.yaml` keeps `plugins`). Each loaded plugin's path, SHA-256 and git
state are the run's provenance (`run.json`'s `plugins`). Torch-free: the plugin itself imports what it needs.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path

from contract.errors import ConfigError
from contract.plugins import locate, plugin_source
from contract.run_record import PluginRecord

from .config import REGISTERED

ACTIVE: list[PluginRecord] = []  # the plugins of this process's current command (`load_plugins`)


def load_plugins(names: Iterable[str]) -> tuple[PluginRecord, ...]:
    """Imports each plugin (anew: an edited file takes effect) and makes them this command's `ACTIVE` ones.

    Raises:
        ConfigError: one line naming the plugin: missing, failing to import, registering a taken name or a
            variant of the wrong interface, or registering nothing.
    """
    records = tuple(_load(name) for name in dict.fromkeys(names))
    ACTIVE[:] = records
    return records


def _load(name: str) -> PluginRecord:
    path = locate(name)
    module_name = "suite_plugin_" + hashlib.sha256(str(path).encode()).hexdigest()[:12] if path else name
    try:
        if path is None:
            try:
                found = importlib.util.find_spec(name)
            except (ImportError, ValueError):  # a parent package that is not there
                found = None
            if found is None:
                raise ConfigError(f"plugins: {name}: no such module (name a .py file or an importable module)")
            sys.modules.pop(name, None)
            module = importlib.import_module(name)
        else:
            spec = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module  # dataclasses and pickling look their module up by name
            spec.loader.exec_module(module)
    except ConfigError as err:
        sys.modules.pop(module_name, None)
        message = str(err)
        raise ConfigError(message if message.startswith("plugins: ") else f"plugins: {name}: {message}") from err
    except (Exception, SystemExit) as err:  # the user's module: any failure to import is its own
        sys.modules.pop(module_name, None)
        raise ConfigError(f"plugins: {name} fails to import: {type(err).__name__}: {err}") from err
    owned = [
        f"{field}={v!r}"
        for field, names in REGISTERED.items()
        for v, owner in names.items()
        if owner in (module.__name__, module.__file__)
    ]
    if not owned:
        raise ConfigError(
            f"plugins: {name} registers no variant (decorate a class or function with models.norms.register_norm, "
            "models.positional.register_positional, models.ffn.register_activation or models.block.register_placement)"
        )
    return plugin_source(Path(module.__file__))
