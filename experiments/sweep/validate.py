"""Checks every cell of a spec with the suite's own parser before any run starts.

Each cell's arguments go through `cli.cli_main(..., run=False)` with a CLI class that stops after
parsing, so a bad key or value gets the CLI's own one-line message (with the valid choices) in well
under a second, and nothing is built, downloaded or trained. The CLI constructs the dataclass-typed
arguments (`ArchConfig`, `OptimConfig`, ...) right after parsing, so their cross-field checks
(`n_heads` divides `d_model`) also fail here rather than minutes into a sweep; and it accepts no
abbreviated key, so `trainer.max_step` fails here with the full key suggested instead of running
(and being recorded) misspelt.
"""

from __future__ import annotations

import contextlib
import glob
import io
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.records.values import format_value
from experiments.sweep.horizons import BRANCHING_SCHEDULES, HORIZON_KEY
from experiments.sweep.resources import RunShape, run_shape
from experiments.sweep.spec import ROOT, Cell, Spec, SpecError
from experiments.sweep.tuning import initial_points
from lit_modules.averaging import uniform_start
from lit_modules.optim import OptimConfig
from lit_modules.schedules import decay_start
from lit_modules.suite_cli import SuiteCLI, cli_main

SEEDED_GROUPS = ("data", "model")  # a `seed` argument of these classes gets the run's seed
SHAPE_KEYS = ("devices", "num_nodes", "accelerator")  # trainer settings that say how many processes a run starts
INPUT_DIRS = ("train_dir", "val_dir", "test_dir", "data_dir")  # data folders read, not written (`*_files` too)


class _ParseOnlyCLI(SuiteCLI):
    """The suite's CLI, stopping after parsing and validating the arguments."""

    def instantiate_classes(self) -> None:
        pass


@dataclass(frozen=True)
class CheckedCell:
    """What the parse of a cell tells the runner and the report.

    Args:
        cell: the cell.
        seed_keys: keys that take the run's seed besides `seed_everything` (`data.init_args.seed`).
        axis_values: the resolved value of every axis key for this cell (also where it did not set it).
        shape: the processes each of its runs starts (`trainer.devices` × `trainer.num_nodes`).
        resolved: its whole config as the parser made it (`resolved_config`): what every run of the cell
            runs, but for the seed and the runner's logger, callbacks and checkpoint.
        branch_start: with `horizons:`, the step where the cell's horizon decays from (`branch_start`); else None.
    """

    cell: Cell
    seed_keys: tuple[str, ...]
    axis_values: dict[str, Any]
    shape: RunShape = RunShape(devices=1)
    resolved: dict[str, Any] = field(default_factory=dict, compare=False)
    branch_start: int | None = None


def override_args(overrides: dict[str, Any]) -> list[str]:
    """`--key=value` for each override; the `=` form keeps values such as `-1` from reading as flags."""
    return [f"--{key}={format_value(value)}" for key, value in overrides.items()]


def config_args(
    base: list[str] | tuple[str, ...], fixed: dict[str, Any], overrides: dict[str, Any], root: Path | None = None
) -> list[str]:
    """`-c` for each base config, then `--key=value` for each fixed key and each override.

    Args:
        base: config files, in order.
        fixed: overrides of every run.
        overrides: the cell's own.
        root: prefix of the config paths (runs start in the repository root and need none; a parse
            in this process must not depend on its working directory).
    """
    configs = [arg for path in base for arg in ("-c", str(root / path) if root else path)]
    return configs + override_args(fixed) + override_args(overrides)


def cell_args(spec: Spec, cell: Cell, root: Path | None = None) -> list[str]:
    """The arguments that define a cell: base configs, then fixed, then the cell's overrides (`config_args`)."""
    return config_args(spec.base, spec.fixed, cell.overrides, root)


def parse(args: list[str]) -> Any:
    """Parses `cli.py` arguments (no subcommand) into a jsonargparse Namespace; builds nothing.

    Raises:
        SpecError: with the CLI's message (which names the key and the valid choices or the fix).
    """
    seed_log = logging.getLogger("lightning.fabric.utilities.seed")
    level = seed_log.level
    seed_log.setLevel(logging.WARNING)  # "Seed set to 0" once per cell is noise here
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return cli_main(args, run=False, cli_class=_ParseOnlyCLI).config
    except SystemExit:
        text = stderr.getvalue()
        error = text[text.rfind("error:") :].removeprefix("error:") if "error:" in text else text
        raise SpecError(error.strip()) from None
    finally:
        seed_log.setLevel(level)


def resolved_config(config: Any) -> dict[str, Any]:
    """A parsed config as JSON data (what `sweep.json` keeps), without `config`: the list of config files
    given, whose paths say where the repository is and how the settings were spelt, not what runs."""
    data = json.loads(json.dumps(config.as_dict(), default=str))
    data.pop("config", None)
    return data


def config_value(config: Any, key: str) -> Any:
    """The value of a dotted CLI key in a parsed config; `model.arch.x` is `model.init_args.arch.x`."""
    head, _, rest = key.partition(".")
    for candidate in (key, f"{head}.init_args.{rest}"):
        with contextlib.suppress(KeyError, AttributeError):
            if candidate in config:
                value = config[candidate]
                return value.as_dict() if hasattr(value, "as_dict") else value
    raise KeyError(key)


def _check_logger(config: Any) -> None:
    logger = config.get("trainer.logger")
    class_path = getattr(logger, "class_path", None) or (logger or {}).get("class_path", "")
    if not str(class_path).endswith("TensorBoardLogger"):
        raise SpecError(f"trainer.logger must be a TensorBoardLogger (the sweep reads its event files), got {logger!r}")


def _check_data_paths(config: Any) -> None:
    """The data's input files and folders exist where the runs will look (their paths are relative to the
    repository, where every run starts): a missing one fails here, not once per run."""
    with contextlib.suppress(KeyError):
        data = config_value(config, "data")
        for key, value in (data.get("init_args") or {}).items():
            if not value or not (key.endswith("_files") or key in INPUT_DIRS):
                continue
            for given in [value] if isinstance(value, str) else value:
                path = ROOT / Path(given).expanduser()  # (an absolute path stays itself, as ~/... does)
                if glob.has_magic(str(given)) and not glob.glob(str(path), recursive=True):
                    raise SpecError(f"data.{key}: the glob {given!r} matches no file (paths are relative to {ROOT})")
                if not glob.has_magic(str(given)) and not path.exists():
                    raise SpecError(f"data.{key}: {given} does not exist (paths are relative to {ROOT}); check the "
                                    "path, or make the file first")  # fmt: skip


def _check_held_out(config: Any) -> None:
    """A tuned sweep selects on validation and reports the test split: the two must differ."""
    with contextlib.suppress(KeyError):
        if config_value(config, "data.test_split") == "val":
            raise SpecError(
                "a tuned sweep reports on a held-out test split, but data.test_split is 'val' (the test would "
                "evaluate the split the tuned values were selected on); set data.test_split: held_out"
            )


def branch_start(config: Any, horizon: int) -> int:
    """Where a horizon's run leaves the stable run: its decay start under its own schedule settings (the schedule
    must hold the peak until then whatever the run's length: `wsd` or `constant`), at least one step in and one
    short of the end, and the horizon evaluated at its end (a multiple of `trainer.val_check_interval`).

    Raises:
        SpecError: naming the setting to change.
    """
    optim = OptimConfig(**dict(config_value(config, "model.optim")))  # the schedule's own reading of its settings
    if optim.schedule not in BRANCHING_SCHEDULES:
        raise SpecError(f"horizons: model.optim.schedule is {optim.schedule!r}, whose rate at every step "
                        f"depends on the run's length, so no horizon can branch from a longer run; set "
                        f"model.optim.schedule: wsd (in fixed:), or constant")  # fmt: skip
    settings = optim.settings
    start = decay_start(horizon, settings)
    if not 1 <= start < horizon:
        raise SpecError(f"horizons: {horizon} steps decay from step {start} (warmup_steps {settings.warmup_steps}, "
                        f"decay_fraction {settings.decay_fraction}); a branch needs at least one stable step and one "
                        f"decay step: lengthen the horizon or change those settings")  # fmt: skip
    _check_uniform_window(config, horizon, start)
    interval = config_value(config, "trainer.val_check_interval")
    if isinstance(interval, bool) or not isinstance(interval, int) or horizon % interval:
        raise SpecError(f"horizons: {horizon} steps is not a multiple of trainer.val_check_interval ({interval!r}), "
                        f"so its runs would not be evaluated at their end; choose horizons that are multiples of it, "
                        f"or fix it to one that divides them")  # fmt: skip
    return start


def _check_uniform_window(config: Any, horizon: int, start: int) -> None:
    """A uniform average over more than the decay would start in the stable phase, where the run that branches
    places the window for the longest horizon, not this one: its average would not be this horizon's."""
    with contextlib.suppress(KeyError):
        averaging = config_value(config, "averaging")
        if averaging.get("kind") == "uniform" and uniform_start(averaging["last_fraction"], horizon) < start:
            raise SpecError(f"horizons: averaging.last_fraction {averaging['last_fraction']} averages from before "
                            f"{horizon} steps' decay start ({start}), inside the stable run it branches from; "
                            f"set averaging.last_fraction at most model.optim.decay_fraction")  # fmt: skip


def _where(spec: Spec, err: Exception) -> str:
    """`file:line` of the setting a cell's error starts with (`model.arch.x: unknown key`), else the spec's file."""
    key = str(err).split(":", 1)[0]
    where = spec.lines.of_setting(key)
    return str(spec.path) if where == spec.lines.file else where


def check_cell(spec: Spec, cell: Cell) -> tuple[CheckedCell, str]:
    """Parses one cell's arguments; returns what the runner needs and a fingerprint of its config.

    Args:
        spec: the sweep.
        cell: one of its cells.

    Raises:
        SpecError: naming the cell and the problem.
    """
    # a tuned key is checked with the grid's first point (a misspelt key fails here, not in a run)
    tuned = override_args(spec.tune.overrides(initial_points(spec.tune)[0])) if spec.tune else []
    try:
        config = parse(cell_args(spec, cell, root=ROOT) + tuned)  # the dataclasses' own checks included
        _check_logger(config)
        _check_data_paths(config)
        if spec.tune:
            _check_held_out(config)
        start = branch_start(config, cell.overrides[HORIZON_KEY]) if spec.horizons else None
    except SpecError as err:
        raise SpecError(f"cell {cell.name!r} ({_where(spec, err)}): {err}") from None
    seed_keys = tuple(f"{g}.init_args.seed" for g in SEEDED_GROUPS if f"{g}.init_args.seed" in config)
    axis_values = {}
    for key in spec.axes:
        try:
            axis_values[key] = config_value(config, key)
        except KeyError:  # a key the parsed config spells otherwise: the spec's value as given
            axis_values[key] = cell.overrides.get(key)
    trainer = {}
    for key in SHAPE_KEYS:
        with contextlib.suppress(KeyError):
            trainer[key] = config_value(config, f"trainer.{key}")
    try:
        shape = run_shape(trainer)
    except ValueError as err:
        raise SpecError(f"cell {cell.name!r} ({_where(spec, err)}): {err}") from None
    resolved = resolved_config(config)
    checked = CheckedCell(cell, seed_keys, axis_values, shape, resolved, start)
    return checked, json.dumps(resolved, sort_keys=True)


def check_spec(spec: Spec) -> dict[str, CheckedCell]:
    """Checks every cell and that no two cells resolve to the same configuration.

    Args:
        spec: the sweep.

    Returns:
        The checked cells by name, in spec order.
    """
    checked: dict[str, CheckedCell] = {}
    seen: dict[str, str] = {}
    for cell in spec.cells:
        result, fingerprint = check_cell(spec, cell)
        if fingerprint in seen:
            raise SpecError(
                f"cells {seen[fingerprint]!r} and {cell.name!r} resolve to the same configuration; "
                "every cell must differ from the others"
            )
        seen[fingerprint] = cell.name
        checked[cell.name] = result
    return checked
