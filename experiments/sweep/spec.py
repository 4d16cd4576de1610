"""Sweep specs: which config files every run starts from, what is fixed, and the cells to compare.

A spec is YAML (a study's specs live in `experiments/studies/<study>/`)::

    extends: other.yaml                                    # optional: start from another spec (path from this one)
    base: [configs/gpt/base.yaml, configs/gpt/tiny.yaml]   # given to `cli.py fit -c`, in order
    fixed: {trainer.max_steps: 300}                        # overrides of every run (optional)
    grid:                                                  # cells = the product of the axes' values
      model.arch.pos_encoding: [none, learned, rope, alibi]
    # or  cells: [{name: small, model.arch.d_model: 64}, {model.arch.d_model: 128}]
    seeds: [0, 1, 2]
    baseline: {model.arch.pos_encoding: learned}           # or a cell name; default: the first cell
    checkpoint_every: 100                                  # steps between resumable checkpoints
    launcher: {partition: gpu, timeout_min: 240}           # resources of `--launcher slurm` jobs (optional)
    require_clean: true                                    # refuse to start from uncommitted code (optional)
    tune: {grid: {optim.lr: [1.0e-3, 3.0e-3, 1.0e-2]}}     # each cell at its own tuned lr (experiments/sweep/tuning.py)
    ladder: [{name: d64, model.arch.d_model: 64}, ...]      # every cell at every size (experiments/sweep/ladder.py)
    pretrained:                                            # keys that take files of another spec's run (optional):
      spec: pretrain.yaml                                  # from this one; the run: results/pretrain/<cell>/seed<k>
      files: {model.init_from: checkpoints/last.ckpt, data.tokenizer_file: tokenizer.json}

This module only reads and expands the file (no torch); `experiments.sweep.validate` checks the values
against the suite's own parser.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from experiments.records.layout import SUMMARY_DIR
from experiments.records.ledger import PHASE_COLUMN
from experiments.records.values import format_value
from experiments.sweep.errors import SpecError
from experiments.sweep.ladder import climb, ladder_baseline, ladder_keys, ladder_snapshot, parse_ladder
from experiments.sweep.spec_blocks import launcher_block, report_options
from experiments.sweep.tuning import Tune, TuneError, parse_tune

ROOT = Path(__file__).resolve().parents[2]  # runs start here: spec paths are relative to it

SPEC_KEYS = ("extends", "base", "fixed", "grid", "cells", "seeds", "baseline", "checkpoint_every", "launcher")
# the report's options, read by the analysis only (experiments/analysis): equivalence margins per metric,
# groups to compare within
REPORT_KEYS = ("equivalence_margin", "compare_within", "ladder_metrics")
SPEC_KEYS += REPORT_KEYS
SPEC_KEYS += ("require_clean",)  # refuse to start from a dirty git tree (experiments/sweep/provenance.py)
SPEC_KEYS += ("tune",)  # each cell at its own tuned values, selected on validation (experiments/sweep/tuning.py)
SPEC_KEYS += ("pretrained",)  # keys that take files of another spec's run (`pretrained_files`)
SPEC_KEYS += ("ladder",)  # every cell at every model size (experiments/sweep/ladder.py)
PRETRAINED_KEYS = ("spec", "files", "cell", "seed")
RESULTS_DIR = "results"  # a study's spec keeps its sweep folder at results/<spec name>/ beside it
# set by the runner for every run; a spec that set them would be silently overridden
RESERVED_KEYS = ("seed_everything", "ckpt_path", "trainer.logger", "trainer.callbacks")
DEFAULT_CHECKPOINT_EVERY = 100


@dataclass(frozen=True)
class Cell:
    """One point of the comparison: a name and the CLI overrides that make it differ.

    Args:
        name: short, filesystem-safe, unique within the sweep (the folder of its runs).
        overrides: dotted CLI key -> value, on top of the spec's `fixed`.
    """

    name: str
    overrides: dict[str, Any]


@dataclass(frozen=True)
class Spec:
    """A parsed sweep spec.

    Args:
        path: the spec file.
        base: config files, in order.
        fixed: overrides applied to every run.
        axes: the keys the cells differ in (grid axes, or every key the explicit cells set).
        cells: the cells, in spec order.
        seeds: seeds every cell runs with.
        baseline: name of the cell the others are compared with.
        checkpoint_every: training steps between checkpoints (resumption granularity).
        launcher: the `launcher:` block (scheduler resources), validated; {} when absent.
        report_options: the report's options: `equivalence_margin` (metric -> margin: a TOST equivalence
            test against it) and `compare_within` (axes: each group of cells sharing their values is compared
            within itself), validated; {} when absent.
        require_clean: refuse to start from a git tree with uncommitted changes.
        tune: the `tune:` block (`experiments.sweep.tuning`); None for a plain sweep.
    """

    path: Path
    base: tuple[str, ...]
    fixed: dict[str, Any]
    axes: tuple[str, ...]
    cells: tuple[Cell, ...]
    seeds: tuple[int, ...]
    baseline: str
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY
    launcher: dict[str, Any] = field(default_factory=dict)
    report_options: dict[str, Any] = field(default_factory=dict)
    require_clean: bool = False
    tune: Tune | None = None
    ladder: dict[str, Any] = field(default_factory=dict)  # `ladder_snapshot`: sizes, each cell's (cell, size)
    cell_by_name: dict[str, Cell] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cell_by_name", {c.name: c for c in self.cells})

    def search_cell(self, cell: Cell) -> Cell:
        """The cell whose search chooses `cell`'s tuned point: itself, or with `tune.search_on` its counterpart
        (the cell with the same overrides but `tune.search_on`'s values), which `load_spec` checks exists."""
        if self.tune is None or not self.tune.search_on:
            return cell
        wanted = cell.overrides | dict(self.tune.search_on)
        return next(c for c in self.cells if c.overrides == wanted)

    @property
    def ledger_axes(self) -> tuple[str, ...]:
        """The ledger's columns after the status: the axes, and for a tuned sweep each run's phase and values."""
        return self.axes + ((PHASE_COLUMN, *self.tune.names) if self.tune else ())

    def snapshot(self) -> dict[str, Any]:
        """The spec's part of `sweep.json`, enough for the report (`experiments.sweep.same_sweep.sweep_info`
        adds each cell's resolved config, which decides whether a folder's sweep may resume)."""
        return {
            "spec": str(self.path),
            "base": list(self.base),
            "fixed": self.fixed,
            "axes": list(self.axes),
            "cells": [{"name": c.name, "overrides": c.overrides} for c in self.cells],
            "seeds": list(self.seeds),
            "baseline": self.baseline,
            "checkpoint_every": self.checkpoint_every,
        } | ({"launcher": self.launcher} if self.launcher else {}) | self.report_options | (
            {"require_clean": True} if self.require_clean else {}
        ) | ({"tune": self.tune.snapshot()} if self.tune else {}) | (
            {"ladder": self.ladder} if self.ladder else {}
        )  # only when set: older files match


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+=,-]+", "-", text) or "-"


def key_labels(keys: list[str]) -> dict[str, str]:
    """Shortest dotted suffix of each key that no other key ends with: `pos_encoding`, `optim.lr`."""
    labels = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            label = ".".join(parts[-n:])
            if not any(other != key and (other == label or other.endswith("." + label)) for other in keys):
                break
        labels[key] = label
    return labels


def cell_name(overrides: Mapping[str, Any], labels: Mapping[str, str]) -> str:
    """`pos_encoding=alibi,norm=rmsnorm`: readable, and safe as a folder name."""
    parts = []
    for key, value in overrides.items():
        shown = "-".join(format_value(v) for v in value) if isinstance(value, (list, tuple)) else format_value(value)
        parts.append(f"{labels[key]}={_safe(shown)}")
    return ",".join(parts) or "base"


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise SpecError(f"{what} must be a mapping of dotted CLI keys to values, got {value!r}")
    for key in value:
        if any(key == r or key.startswith(r + ".") for r in RESERVED_KEYS):
            raise SpecError(
                f"{what}: {key!r} is set by the sweep runner for every run; reserved: {list(RESERVED_KEYS)}"
            )
    return dict(value)


def _expand(raw: Mapping[str, Any]) -> tuple[tuple[str, ...], list[Cell]]:
    if ("grid" in raw) == ("cells" in raw):
        raise SpecError("a spec needs exactly one of `grid:` (axes -> values) or `cells:` (a list of overrides)")
    if "grid" in raw:
        grid = _mapping(raw["grid"], "grid")
        if not grid:
            raise SpecError("grid: needs at least one axis")
        for key, values in grid.items():
            if not isinstance(values, list) or not values:
                raise SpecError(f"grid: axis {key!r} needs a non-empty list of values, got {values!r}")
        axes = tuple(grid)
        labels = key_labels(list(axes))
        combos = [dict(zip(axes, values)) for values in itertools.product(*grid.values())]
        return axes, [Cell(cell_name(o, labels), o) for o in combos]
    entries = raw["cells"]
    if not isinstance(entries, list) or not entries:
        raise SpecError(f"cells: needs a non-empty list of override mappings, got {entries!r}")
    overrides = []
    for i, entry in enumerate(entries):
        entry = _mapping(entry, f"cells[{i}]")
        name = entry.pop("name", None)
        if name is not None and (not isinstance(name, str) or _safe(name) != name or name[0] in "_-"):
            raise SpecError(
                f"cells[{i}]: name {name!r} must be filesystem-safe ([A-Za-z0-9._+=,-]) and not start with '_' or '-'"
            )
        overrides.append((name, entry))
    axes = tuple(dict.fromkeys(k for _, o in overrides for k in o))
    labels = key_labels(list(axes))
    return axes, [Cell(name or cell_name(o, labels), o) for name, o in overrides]


def _check_tune_on(tune: Tune, axes: tuple[str, ...], cells: list[Cell]) -> None:
    """`tune.search_on` names varied keys, and every cell has a counterpart with those values to share."""
    for key, value in tune.search_on:
        values = list(dict.fromkeys(c.overrides.get(key) for c in cells))
        if key not in axes or value not in values:
            varied = {k: list(dict.fromkeys(c.overrides.get(k) for c in cells)) for k in axes}
            raise SpecError(
                f"tune.search_on: {key}={value!r} is not a value of a varied key; the spec varies {varied}"
            )
    for cell in cells:
        wanted = cell.overrides | dict(tune.search_on)
        if not any(c.overrides == wanted for c in cells):
            raise SpecError(
                f"tune.search_on: cell {cell.name!r} has no counterpart with {dict(tune.search_on)} whose search "
                "it could share; add that cell, or drop tune.search_on"
            )


def _baseline(value: Any, cells: list[Cell]) -> str:
    if value is None:
        return cells[0].name
    if isinstance(value, str):
        if value not in {c.name for c in cells}:
            raise SpecError(f"baseline: no cell named {value!r}; cells: {[c.name for c in cells]}")
        return value
    wanted = _mapping(value, "baseline")
    matches = [
        c.name
        for c in cells
        if all(k in c.overrides and format_value(c.overrides[k]) == format_value(v) for k, v in wanted.items())
    ]
    if len(matches) != 1:
        found = "no cell" if not matches else f"several cells ({matches})"
        raise SpecError(f"baseline: {wanted} matches {found}; cells: {[c.name for c in cells]}")
    return matches[0]


def _known_keys(value: Any, valid: tuple[str, ...], where: str, what: str = "key(s)") -> dict[str, Any]:
    """`value` as a dict, when it is a mapping of `valid` keys; else a SpecError that lists them."""
    if not isinstance(value, Mapping):
        raise SpecError(f"{where}: needs a mapping with keys {list(valid)}, got {value!r}")
    unknown = [k for k in value if k not in valid]
    if unknown:
        raise SpecError(f"{where}: unknown {what} {unknown}; valid keys: {list(valid)}")
    return dict(value)


def _pretrained(value: Any, path: Path) -> dict[str, Any]:
    """The `pretrained:` block of the spec at `path`, checked, its `spec` made absolute."""
    out = _known_keys(value, PRETRAINED_KEYS, f"{path}: pretrained")
    if "spec" in out:
        if not isinstance(out["spec"], str):
            raise SpecError(f"{path}: pretrained.spec: needs the path of another spec, got {out['spec']!r}")
        out["spec"] = str((path.parent / out["spec"]).resolve())
    if "files" in out:
        files = _mapping(out["files"], "pretrained.files")
        if not files or not all(isinstance(f, str) and f for f in files.values()):
            raise SpecError(f"{path}: pretrained.files: needs keys mapped to files of the run, got {out['files']!r}")
    if "cell" in out and not isinstance(out["cell"], str):
        raise SpecError(f"{path}: pretrained.cell: needs a cell name, got {out['cell']!r}")
    if "seed" in out and (isinstance(out["seed"], bool) or not isinstance(out["seed"], int)):
        raise SpecError(f"{path}: pretrained.seed: needs a seed, got {out['seed']!r}")
    return out


def pretrained_files(pretrained: Mapping[str, Any] | None) -> dict[str, str]:
    """The `fixed` keys a `pretrained:` block gives: each key of `files`, the path of that file in the other
    spec's run, relative to the repository root (where runs start) when it is below it.

    The run is the other spec's only cell and seed (or its `cell:` and `seed:`), in its sweep folder
    `results/<its name>/` beside it: where a study keeps each spec's sweep folder, and where the other
    spec's documented command puts it. A fine-tune so names the run it starts from once, instead of
    restating its folder in every key (and in every variant for another family).

    Args:
        pretrained: the spec's `pretrained:` block, as `read_spec` returns it; None when absent.
    """
    if not pretrained:
        return {}
    missing = [k for k in ("spec", "files") if k not in pretrained]
    if missing:
        raise SpecError(f"pretrained: needs {missing}: the other spec and the keys that take files of its run")
    path = Path(pretrained["spec"])
    other = read_spec(path)
    _, cells = _expand(other)
    names, seeds = [c.name for c in cells], other.get("seeds", [0])
    cell, seed = pretrained.get("cell"), pretrained.get("seed")
    if cell is None and len(names) != 1:
        raise SpecError(f"pretrained: {path.name} has cells {names}: name one with pretrained.cell")
    if seed is None and len(seeds) != 1:
        raise SpecError(f"pretrained: {path.name} has seeds {seeds}: name one with pretrained.seed")
    cell, seed = names[0] if cell is None else cell, seeds[0] if seed is None else seed
    if cell not in names or seed not in seeds:
        raise SpecError(f"pretrained: {path.name} has no run {cell}/seed{seed}; cells: {names}, seeds: {seeds}")
    run = path.parent / RESULTS_DIR / path.stem / cell / f"seed{seed}"
    if run.is_relative_to(ROOT):
        run = run.relative_to(ROOT)
    return {key: str(run / file) for key, file in pretrained["files"].items()}


def read_spec(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The spec's mapping with `extends:` applied: a variant is a small diff of the spec it extends.

    The extended spec's keys are the defaults; `fixed`, `launcher` and `pretrained` are merged key by key
    (the variant's values win), `grid`/`cells` of the variant replace the extended ones, every other key
    replaces. `pretrained.spec` becomes an absolute path (it is a path from the file that gives it).

    Args:
        path: the YAML file.
    """
    path = Path(path)
    if path.resolve() in _seen:
        raise SpecError(f"extends: cycle through {path}")
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise SpecError(f"cannot read spec {path}: {err}") from err
    raw = _known_keys(raw, SPEC_KEYS, f"{path}: a spec", "top-level key(s)")
    if "pretrained" in raw:
        raw["pretrained"] = _pretrained(raw["pretrained"], path)
    parent_name = raw.pop("extends", None)
    if parent_name is None:
        return raw
    if not isinstance(parent_name, str):
        raise SpecError(f"{path}: extends: needs the path of another spec, got {parent_name!r}")
    parent = read_spec(path.parent / parent_name, (*_seen, path.resolve()))
    if "grid" in raw or "cells" in raw:
        parent.pop("grid", None)
        parent.pop("cells", None)
    fixed = _mapping(parent.get("fixed"), "fixed") | _mapping(raw.pop("fixed", None), "fixed")
    launcher = launcher_block(parent.get("launcher")) | launcher_block(raw.pop("launcher", None))
    pretrained = (parent.get("pretrained") or {}) | (raw.pop("pretrained", None) or {})
    merged = {"fixed": fixed, "launcher": launcher, "pretrained": pretrained}
    return parent | raw | {key: value for key, value in merged.items() if value}


def load_spec(path: str | Path) -> Spec:
    """Reads and expands a spec; every structural problem raises `SpecError` naming the key.

    Args:
        path: the YAML file.
    """
    path = Path(path)
    raw = read_spec(path)

    base = raw.get("base")
    base = [base] if isinstance(base, str) else base
    if not isinstance(base, list) or not base or not all(isinstance(b, str) for b in base):
        raise SpecError(f"base: needs a config file or a list of them, got {raw.get('base')!r}")
    missing = [b for b in base if not (ROOT / b).is_file()]
    if missing:
        raise SpecError(f"base: config file(s) not found (paths are relative to {ROOT}): {missing}")

    fixed = _mapping(raw.get("fixed"), "fixed")
    axes, cells = _expand(raw)
    derived = pretrained_files(raw.get("pretrained"))
    clash = [k for k in derived if k in fixed or k in axes]
    if clash:
        raise SpecError(f"pretrained.files: key(s) {clash} are also fixed or varied; keep each in one place")
    fixed |= derived
    clash = [k for k in axes if k in fixed]
    if clash:
        raise SpecError(f"key(s) {clash} are both fixed and varied; keep each in one place")
    rungs = parse_ladder(raw.get("ladder"), (*fixed, *axes))
    baseline, options = raw.get("baseline"), dict(raw)
    ladder = ladder_snapshot(cells, rungs) if rungs else {}
    if rungs:
        baseline = ladder_baseline(baseline, cells, rungs)
        if axes and "compare_within" not in raw:  # each cell against the baseline at its own size
            options["compare_within"] = list(ladder_keys(rungs))
        cells, axes = climb(cells, rungs, Cell), (*axes, *ladder_keys(rungs))
    names = [c.name for c in cells]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SpecError(f"cell names are not unique: {duplicates}; give the cells a `name:`")
    if SUMMARY_DIR in names:
        raise SpecError(f"cell name {SUMMARY_DIR!r} is reserved for the sweep's summary")

    seeds = raw.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and s >= 0 for s in seeds):
        raise SpecError(f"seeds: needs a non-empty list of non-negative integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise SpecError(f"seeds: {seeds} repeats a seed")
    every = raw.get("checkpoint_every", DEFAULT_CHECKPOINT_EVERY)
    if not isinstance(every, int) or every < 1:
        raise SpecError(f"checkpoint_every: needs a positive number of steps, got {every!r}")
    require_clean = raw.get("require_clean", False)
    if not isinstance(require_clean, bool):
        raise SpecError(f"require_clean: needs true or false, got {require_clean!r}")
    try:
        tune = parse_tune(raw.get("tune"), tuple(seeds), (*fixed, *axes))
    except TuneError as err:
        raise SpecError(str(err)) from None
    if tune is not None:
        _check_tune_on(tune, axes, cells)

    return Spec(
        path=path,
        base=tuple(base),
        fixed=fixed,
        axes=axes,
        cells=tuple(cells),
        seeds=tuple(seeds),
        baseline=_baseline(baseline, cells),
        checkpoint_every=every,
        launcher=launcher_block(raw.get("launcher")),
        report_options=report_options(options, axes),
        require_clean=require_clean,
        tune=tune,
        ladder=ladder,
    )
