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
    launcher: {partition: gpu, timeout_min: 240}           # resources of `--launcher slurm` jobs (spec_blocks)
    require_clean: true                                    # refuse to start from uncommitted code (optional)
    plugins: [my_ideas/norms.py]                           # modules registering variants (models.plugins; optional)
    tune: {grid: {optim.lr: [1.0e-3, 3.0e-3, 1.0e-2]}}     # each cell at its own tuned lr (experiments/sweep/tuning.py)
    ladder: [{name: d64, model.arch.d_model: 64}, ...]      # every cell at every size (experiments/sweep/ladder.py)
    # with a ladder, `tune.transfer` searches at one size only, carries the choice to the others (unchanged, or by
    # a stated rule) and verifies it at the largest at ×½, ×1, ×2 (experiments/sweep/transfer.py):
    #   tune: {grid: {optim.lr: [...]}, transfer: {from: d64, rule: {optim.lr: {with: model.arch.d_model,
    #          power: -1}}, verify: [0.5, 1, 2]}}
    horizons: [800, 3200, 12800]                           # every cell at each training length, from one stable run
    # and a decay branch per length (needs model.optim.schedule: wsd or constant; experiments/sweep/horizons.py)
    pretrained:                                            # keys that take files of another spec's run (optional):
      spec: pretrain.yaml                                  # from this one; the run: results/pretrain/<cell>/seed<k>
      files: {model.init_from: checkpoints/last.ckpt, data.tokenizer_file: tokenizer.json}
    equivalence_margin: {val/loss: 0.02}                   # the report's options (spec_blocks.ReportOptions)

`spec_source` reads the YAML (`extends:` merged first); `load_spec` types every block, in one place, and an
error names the file and line of its key. No torch here: `experiments.sweep.validate` checks the values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from contract.errors import ConfigError
from contract.plugins import plugin_list
from experiments.records.layout import SUMMARY_DIR
from experiments.records.ledger import HORIZON_COLUMN, PARENT_COLUMN, PHASE_COLUMN
from experiments.sweep.horizons import (
    HORIZON_KEY,
    Horizons,
    at_horizons,
    check_tuned_horizons,
    horizons_baseline,
    parse_horizons,
)
from experiments.sweep.ladder import Ladder, climb, ladder_baseline, parse_ladder
from experiments.sweep.spec_blocks import LauncherOptions, Pretrained, ReportOptions
from experiments.sweep.spec_cells import Cell, Overrides, baseline_name, check_names, expand, overrides, seed_list
from experiments.sweep.spec_error import SpecError
from experiments.sweep.spec_source import Lines, Located, known_keys, read_located
from experiments.sweep.transfer import TRANSFER_KEYS, parse_transfer
from experiments.sweep.tuning import TUNE_KEYS, Tune, TuneError, check_search_on, parse_tune

ROOT = Path(__file__).resolve().parents[2]  # runs start here: spec paths are relative to it
RESULTS_DIR = "results"  # a study's spec keeps its sweep folder at results/<spec name>/ beside it
DEFAULT_CHECKPOINT_EVERY = 100
SPEC_KEYS = (  # every top-level key of a spec
    "extends", "base", "fixed", "grid", "cells", "seeds", "baseline", "checkpoint_every", "require_clean",
    "plugins", "launcher", "tune", "ladder", "horizons", "pretrained", *ReportOptions.keys(),
)  # fmt: skip


@dataclass(frozen=True)
class Spec:
    """A parsed sweep spec.

    Args:
        path: the spec file.
        base: config files, in order.
        fixed: overrides applied to every run (with the files of a `pretrained:` run).
        axes: the keys the cells differ in (grid axes, or every key the explicit cells set; a ladder's keys).
        cells: the cells, in spec order (a ladder: every cell at every size).
        seeds: seeds every cell runs with.
        baseline: name of the cell the others are compared with.
        checkpoint_every: training steps between checkpoints (resumption granularity).
        launcher: the `launcher:` block (scheduler resources).
        report: the report's options.
        require_clean: refuse to start from a git tree with uncommitted changes.
        tune: the `tune:` block (`experiments.sweep.tuning`); None for a plain sweep.
        ladder: the `ladder:` block (`experiments.sweep.ladder`); None without one.
        horizons: the `horizons:` block (`experiments.sweep.horizons`); None without one.
        pretrained: the `pretrained:` block, whose files `fixed` holds; None without one.
        lines: where each key was written (a cell's error names the line of the setting it is about).
    """

    path: Path
    base: tuple[str, ...]
    fixed: Overrides
    axes: tuple[str, ...]
    cells: tuple[Cell, ...]
    seeds: tuple[int, ...]
    baseline: str
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY
    launcher: LauncherOptions = field(default_factory=LauncherOptions)
    report: ReportOptions = field(default_factory=ReportOptions)
    require_clean: bool = False
    tune: Tune | None = None
    ladder: Ladder | None = None
    horizons: Horizons | None = None
    pretrained: Pretrained | None = None
    lines: Lines = field(default_factory=Lines, repr=False, compare=False)
    cell_by_name: dict[str, Cell] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cell_by_name", {c.name: c for c in self.cells})

    def search_cell(self, cell: Cell) -> Cell:
        """The cell whose search chooses `cell`'s tuned point: itself, or its counterpart: the cell with the same
        overrides but `tune.search_on`'s values (which `load_spec` checks exists) and, with `tune.transfer`,
        the size that searches (every cell of a ladder is at every size)."""
        if self.tune is None or not (self.tune.search_on or self.tune.transfer):
            return cell
        wanted = cell.overrides | dict(self.tune.search_on)
        wanted |= self.tune.transfer.source.overrides if self.tune.transfer else {}
        return next(c for c in self.cells if c.overrides == wanted)

    @property
    def ledger_axes(self) -> tuple[str, ...]:
        """The ledger's columns after the status: the axes, and for a tuned sweep each run's phase and values (with
        `horizons:`, each run's phase, horizon and parent)."""
        if self.horizons:
            return (*self.axes, PHASE_COLUMN, HORIZON_COLUMN, PARENT_COLUMN, *(self.tune.names if self.tune else ()))
        return self.axes + ((PHASE_COLUMN, *self.tune.names) if self.tune else ())

    def snapshot(self) -> dict[str, Any]:
        """The spec's part of `sweep.json`, enough for the report (`experiments.sweep.same_sweep.sweep_info`
        adds each cell's resolved config, which decides whether a folder's sweep may resume). Optional blocks
        only when set: older files match."""
        return {
            "spec": str(self.path),
            "base": list(self.base),
            "fixed": self.fixed,
            "axes": list(self.axes),
            "cells": [{"name": c.name, "overrides": c.overrides} for c in self.cells],
            "seeds": list(self.seeds),
            "baseline": self.baseline,
            "checkpoint_every": self.checkpoint_every,
        } | ({"launcher": self.launcher.snapshot()} if self.launcher.snapshot() else {}) | self.report.snapshot() | (
            {"require_clean": True} if self.require_clean else {}
        ) | ({"tune": self.tune.snapshot()} if self.tune else {}) | (
            {"ladder": self.ladder.snapshot()} if self.ladder else {}
        ) | ({"horizons": self.horizons.snapshot()} if self.horizons else {})  # fmt: skip


def read_spec(path: str | Path) -> dict[str, Any]:
    """The spec's mapping with `extends:` applied, untyped (`spec_source.read_located`)."""
    return read_located(path, SPEC_KEYS)[0]


def pretrained_files(pretrained: Pretrained | Mapping[str, Any] | None) -> dict[str, str]:
    """The `fixed` keys a `pretrained:` block gives: each key of `files`, the path of that file in the other
    spec's run, relative to the repository root (where runs start) when it is below it.

    The run is the other spec's only cell and seed (or its `cell:` and `seed:`), in its sweep folder
    `results/<its name>/` beside it: where a study keeps each spec's sweep folder, and where the other
    spec's documented command puts it. A fine-tune so names the run it starts from once, instead of
    restating its folder in every key (and in every variant for another family).

    Args:
        pretrained: the block, typed or as `read_spec` returns it; None when absent.
    """
    if isinstance(pretrained, Mapping):
        pretrained = Pretrained.parse(pretrained, Lines(file="pretrained"))
    if pretrained is None:
        return {}
    path = Path(pretrained.spec)
    other = read_spec(path)
    _, cells = expand(other.get("grid"), other.get("cells"))
    names, seeds = [c.name for c in cells], other.get("seeds", [0])
    cell, seed = pretrained.cell, pretrained.seed
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
    return {key: str(run / file) for key, file in pretrained.files.items()}


def load_spec(path: str | Path) -> Spec:
    """Reads, types and expands a spec; every problem raises `SpecError` naming the key, and the file and
    line where the YAML has it (the key its message starts with: `launcher.timeout_min: ...`).

    Args:
        path: the YAML file.
    """
    path = Path(path)
    raw, lines = read_located(path, SPEC_KEYS)
    try:
        return _typed(path, raw, lines)
    except SpecError as err:
        if isinstance(err, Located):
            raise
        keys = re.match(r"(\w+)(?:[.\[](\w+))?", str(err))
        where = lines.at(*(k for k in keys.groups() if k)) if keys and keys[1] in SPEC_KEYS else lines.file
        raise Located(f"{where}: {err}") from None


def _typed(path: Path, raw: dict[str, Any], lines: Lines) -> Spec:
    base = [raw.get("base")] if isinstance(raw.get("base"), str) else raw.get("base")
    if not isinstance(base, list) or not base or not all(isinstance(b, str) for b in base):
        raise SpecError(f"base: needs a config file or a list of them, got {raw.get('base')!r}")
    missing = [b for b in base if not (ROOT / b).is_file()]
    if missing:
        raise SpecError(f"base: config file(s) not found (paths are relative to {ROOT}): {missing}")

    fixed = overrides(raw.get("fixed"), "fixed")
    if raw.get("plugins") is not None:  # every run's `--plugins` (models.plugins), the parse of its cells too
        if "plugins" in fixed:
            raise SpecError("plugins: is also in fixed; keep it in one place")
        try:
            fixed["plugins"] = plugin_list(raw["plugins"])
        except ConfigError as err:
            raise SpecError(str(err)) from None
    axes, cells = expand(raw.get("grid"), raw.get("cells"))
    pretrained = Pretrained.parse(raw.get("pretrained"), lines)
    derived = pretrained_files(pretrained)
    clash = [k for k in derived if k in fixed or k in axes]
    if clash:
        raise SpecError(f"pretrained.files: key(s) {clash} are also fixed or varied; keep each in one place")
    fixed |= derived
    clash = [k for k in axes if k in fixed]
    if clash:
        raise SpecError(f"key(s) {clash} are both fixed and varied; keep each in one place")

    rungs = parse_ladder(raw.get("ladder"), (*fixed, *axes))
    ladder = Ladder(rungs, tuple(c.name for c in cells)) if rungs else None
    baseline, report = raw.get("baseline"), {k: raw[k] for k in ReportOptions.keys() if k in raw}
    if ladder:
        baseline = ladder_baseline(baseline, cells, rungs)
        if axes and "compare_within" not in raw:  # each cell against the baseline at its own size
            report["compare_within"] = list(ladder.keys)
        cells, axes = climb(cells, rungs, Cell), (*axes, *ladder.keys)
    blocks = {"ladder": ladder is not None}
    steps = parse_horizons(raw.get("horizons"), (*fixed, *axes), blocks)
    horizons = Horizons(steps, tuple(c.name for c in cells)) if steps else None
    if horizons:
        baseline = horizons_baseline(baseline, cells, steps)
        if axes and "compare_within" not in raw:  # each cell against the baseline at its own horizon
            report["compare_within"] = [HORIZON_KEY]
        cells, axes = at_horizons(cells, steps, Cell), (*axes, HORIZON_KEY)
    check_names(cells, SUMMARY_DIR)

    seeds = seed_list(raw.get("seeds", [0]))
    every = raw.get("checkpoint_every", DEFAULT_CHECKPOINT_EVERY)
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise SpecError(f"checkpoint_every: needs a positive number of steps, got {every!r}")
    require_clean = raw.get("require_clean", False)
    if not isinstance(require_clean, bool):
        raise SpecError(f"require_clean: needs true or false, got {require_clean!r}")
    if isinstance(raw.get("tune"), Mapping):
        known_keys(raw["tune"], TUNE_KEYS, "tune", lines, "tune")
        if isinstance(raw["tune"].get("transfer"), Mapping):
            known_keys(raw["tune"]["transfer"], TRANSFER_KEYS, "tune.transfer", lines, "tune", "transfer")
    try:
        tune = parse_tune(raw.get("tune"), seeds, (*fixed, *axes))
        if tune is not None:
            check_search_on(tune, axes, cells)
            if "transfer" in raw["tune"]:  # `transfer:` alone: every default
                transfer = raw["tune"]["transfer"]
                tune = replace(tune, transfer=parse_transfer({} if transfer is None else transfer, tune, rungs))
        if tune is not None and horizons is not None and (why := check_tuned_horizons(tune)):
            raise SpecError(why)
    except TuneError as err:
        raise SpecError(str(err)) from None

    return Spec(
        path=path,
        base=tuple(base),
        fixed=fixed,
        axes=axes,
        cells=tuple(cells),
        seeds=seeds,
        baseline=baseline_name(baseline, cells),
        checkpoint_every=every,
        launcher=LauncherOptions.parse(raw.get("launcher"), lines),
        report=ReportOptions.parse(report, axes, ladder is not None),
        require_clean=require_clean,
        tune=tune,
        ladder=ladder,
        horizons=horizons,
        pretrained=pretrained,
        lines=lines,
    )
