"""What the suite knows of a plugin module (`models.plugins` imports them) without importing it: the names a
`plugins` value lists, the file each names, and its provenance (SHA-256, git state). Torch-free."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

from contract.errors import ConfigError
from contract.git import REPO, file_commit
from contract.run_record import PluginRecord


def plugin_list(value: object) -> list[str]:
    """A `plugins` value as a list of names: None, one string, or a list of strings."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ConfigError(f"plugins: needs a module path or a list of them, got {value!r}")


def locate(name: str) -> Path | None:
    """The file a plugin name names: a path (relative to the working directory, else to the suite's root)."""
    if not (name.endswith(".py") or "/" in name or "\\" in name):
        return None
    roots = list(dict.fromkeys((Path.cwd().resolve(), REPO)))
    for root in roots:
        if (root / name).is_file():
            return (root / name).resolve()
    where = "" if Path(name).is_absolute() else f" (looked in {' and '.join(map(str, roots))})"
    raise ConfigError(f"plugins: {name}: no such file{where}")


def plugin_file(name: str) -> Path | None:
    """The file of a plugin (a path, or a module's source); None for a module that cannot be found."""
    path = locate(name)
    if path is not None:
        return path
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return Path(found.origin).resolve() if found is not None and found.origin else None


def plugin_source(path: Path) -> PluginRecord:
    """A plugin file's provenance: its path, SHA-256, and the commit of the repository holding it (`-dirty`)."""
    file = Path(path).resolve()
    return PluginRecord(
        path=str(file), sha256=hashlib.sha256(file.read_bytes()).hexdigest(), git_commit=file_commit(file)
    )
