"""Reading a spec's YAML: its `extends:` chain merged into one mapping, and where each key was written.

A variant is a small diff of the spec it extends: the extended spec's keys are the defaults; `fixed`,
`launcher` and `pretrained` are merged key by key (the variant's values win), `grid`/`cells` of the variant
replace the extended ones, every other key replaces. `pretrained.spec` becomes an absolute path (it is a path
from the file that gives it). Typing happens after the merge (`experiments.sweep.spec.load_spec`), so an error
names the key as merged, and `Lines` says in which file and on which line that key was written.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from experiments.sweep.spec_error import SpecError

MERGED = ("fixed", "launcher", "pretrained")  # merged key by key with the extended spec's
REPLACED_TOGETHER = ("grid", "cells")  # a variant's grid or cells replaces both of the extended spec's


@dataclass
class Lines:
    """Where each key of a merged spec was written: `("launcher", "partition")` -> `spec.yaml:12`."""

    found: dict[tuple[str, ...], str] = field(default_factory=dict)
    file: str = "spec"

    def at(self, *keys: str) -> str:
        """`file:line` of the deepest of `keys` written somewhere (else the spec's file)."""
        for n in range(len(keys), 0, -1):
            if keys[:n] in self.found:
                return self.found[keys[:n]]
        return self.file

    def of_setting(self, key: str) -> str:
        """`file:line` where a run setting (`model.arch.activation`) is first written, in `fixed`, `grid`, a
        cell or a ladder rung (else the spec's file): where a cell's parse error points."""
        return next((line for keys, line in self.found.items() if keys[-1] == key and len(keys) > 1), self.file)


class Located(SpecError):
    """A SpecError that already names the file and line (`load_spec` adds them to the others)."""


def _key_lines(node: yaml.Node, path: Path, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], str]:
    """Each mapping key of a composed YAML document (one level into lists: `cells.0.name`) -> `file:line`."""
    out: dict[tuple[str, ...], str] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            here = (*prefix, str(key.value))
            out[here] = f"{path}:{key.start_mark.line + 1}"
            out |= _key_lines(value, path, here)
    elif isinstance(node, yaml.SequenceNode) and len(prefix) < 2:
        for i, item in enumerate(node.value):
            out[(*prefix, str(i))] = f"{path}:{item.start_mark.line + 1}"
            out |= _key_lines(item, path, (*prefix, str(i)))
    return out


def known_keys(
    value: Any, valid: Sequence[str], where: str, lines: Lines, *keys: str, what: str = "key(s)"
) -> dict[str, Any]:
    """`value` as a dict when it is a mapping of `valid` keys; else a SpecError naming the file and line of the
    first unknown key and listing the valid ones."""
    if not isinstance(value, Mapping):
        raise Located(f"{lines.at(*keys)}: {where}: needs a mapping with keys {list(valid)}, got {value!r}")
    unknown = [k for k in value if k not in valid]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), [str(v) for v in valid], n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise Located(
            f"{lines.at(*keys, str(unknown[0]))}: {where}: unknown {what} {unknown}{hint}; valid keys: {list(valid)}"
        )
    return dict(value)


def read_located(path: str | Path, valid: Sequence[str], _seen: tuple[Path, ...] = ()) -> tuple[dict[str, Any], Lines]:
    """The spec's mapping with `extends:` applied (see the module docstring), and where its keys were written.

    Args:
        path: the YAML file.
        valid: the top-level keys a spec may have.
    """
    path = Path(path)
    if path.resolve() in _seen:
        raise SpecError(f"extends: cycle through {path}")
    try:
        text = path.read_text()
        node, raw = yaml.compose(text), yaml.safe_load(text)
    except (OSError, yaml.YAMLError) as err:
        raise SpecError(f"cannot read spec {path}: {err}") from err
    lines = Lines(_key_lines(node, path) if node is not None else {}, str(path))
    raw = known_keys(raw, valid, "a spec", lines, what="top-level key(s)")
    pretrained = raw.get("pretrained")
    if isinstance(pretrained, Mapping) and isinstance(pretrained.get("spec"), str):
        raw["pretrained"] = dict(pretrained) | {"spec": str((path.parent / pretrained["spec"]).resolve())}
    parent_name = raw.pop("extends", None)
    if parent_name is None:
        return raw, lines
    if not isinstance(parent_name, str):
        raise Located(f"{lines.at('extends')}: extends: needs the path of another spec, got {parent_name!r}")
    parent, parent_lines = read_located(path.parent / parent_name, valid, (*_seen, path.resolve()))
    if any(key in raw for key in REPLACED_TOGETHER):
        for key in REPLACED_TOGETHER:
            parent.pop(key, None)
    merged = {}
    for key in MERGED:
        both = [block for block in (parent.get(key), raw.pop(key, None)) if block is not None]
        if not all(isinstance(block, Mapping) for block in both):
            raise Located(f"{lines.at(key)}: {key}: needs a mapping, got {both[-1]!r}")
        merged[key] = {k: v for block in both for k, v in block.items()}
    return parent | raw | {key: value for key, value in merged.items() if value}, Lines(
        parent_lines.found | lines.found, str(path)
    )
