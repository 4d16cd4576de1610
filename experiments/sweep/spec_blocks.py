"""Three optional blocks of a spec, each a dataclass whose fields are its valid keys: `launcher:` (the resources
of scheduler jobs), the report's options (`equivalence_margin`, `compare_within`, `ladder_metrics`, top-level
keys read by the analysis only) and `pretrained:` (keys that take files of another spec's run)."""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Union, get_args, get_origin, get_type_hints

from contract.metrics import EVALUATION_PREFIXES
from experiments.sweep.spec_cells import Value
from experiments.sweep.spec_error import SpecError
from experiments.sweep.spec_source import Lines, Located, known_keys


def _kinds(hint: Any) -> tuple[type, ...]:
    """The YAML types a field's annotation accepts: `int | None` -> int; `tuple[str, ...]` -> list."""
    options = get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)
    kinds = tuple(get_origin(t) or t for t in options if t is not type(None))
    return tuple(list if k is tuple else k for k in kinds) + ((int,) if float in kinds else ())


def _typed_fields(cls: type, raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`raw`'s values checked against `cls`'s annotations (numbers positive); lists become tuples."""
    hints = get_type_hints(cls)  # `Value` is a name of this module: its forward references resolve here
    out = {}
    for key, item in raw.items():
        kinds = _kinds(hints[key])
        if not isinstance(item, kinds) or isinstance(item, bool):
            names = " or ".join(dict.fromkeys(k.__name__ for k in kinds))
            raise SpecError(f"{where}.{key}: needs {names}, got {item!r}")
        if isinstance(item, (int, float)) and item <= 0:
            raise SpecError(f"{where}.{key}: needs a positive number, got {item!r}")
        out[key] = tuple(item) if isinstance(item, list) else item
    return out


@dataclass(frozen=True)
class LauncherOptions:
    """The `launcher:` block: resources of each job of `--launcher slurm` (and `local`: `timeout_min`,
    `gpus_per_node`); nodes and tasks per node come from each run's trainer.num_nodes and trainer.devices.
    Other `slurm_*` keys are submitit's own parameters (`slurm_other`), which it checks."""

    partition: str | None = None
    nodes: int | None = None
    tasks_per_node: int | None = None
    gpus_per_node: int | None = None
    cpus_per_task: int | None = None
    timeout_min: int | None = None
    mem_gb: float | None = None
    slurm_array_parallelism: int | None = None
    slurm_additional_parameters: dict[str, Value] = field(default_factory=dict)  # any sbatch option: {qos: high}
    slurm_setup: tuple[str, ...] = ()  # shell lines run before the job's tasks: module load ..., source ...
    slurm_other: dict[str, Value] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Any, lines: Lines) -> LauncherOptions:
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise SpecError(f"launcher: needs a mapping of job resources, got {raw!r}")
        names = [f.name for f in fields(cls) if f.name != "slurm_other"]
        for key in raw:
            if key not in names and not (isinstance(key, str) and key.startswith("slurm_")):
                raise Located(f"{lines.at('launcher', str(key))}: launcher: unknown key {key!r}; valid keys: "
                              f"{names} and other slurm_* keys")  # fmt: skip
        other = {k: v for k, v in raw.items() if k not in names}
        typed = _typed_fields(cls, {k: v for k, v in raw.items() if k in names}, "launcher")
        if not all(isinstance(k, str) for k in typed.get("slurm_additional_parameters", {})):
            raise SpecError("launcher.slurm_additional_parameters: keys must be sbatch option names")
        if not all(isinstance(line, str) for line in typed.get("slurm_setup", ())):
            raise SpecError("launcher.slurm_setup: needs a list of shell lines")
        return cls(**typed, slurm_other=other)

    def snapshot(self) -> dict[str, Any]:
        """The block as a spec writes it: the keys set."""
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items() if v not in (None, (), {})}
        return out | out.pop("slurm_other", {})

    def slurm(self) -> dict[str, Any]:
        """The keys that are submitit's `slurm_*` parameters as they are (`partition` is `slurm_partition`)."""
        return {("slurm_partition" if k == "partition" else k): v for k, v in self.snapshot().items()
                if k == "partition" or k.startswith("slurm_")}  # fmt: skip


def _is_metric(name: Any) -> bool:
    return isinstance(name, str) and name.startswith(EVALUATION_PREFIXES)


@dataclass(frozen=True)
class ReportOptions:
    """The report's options (`experiments.analysis`), checked here so a bad one fails before any run.

    Args:
        equivalence_margin: `val/*` or `test/*` metric -> a positive margin: a TOST equivalence test against it.
        compare_within: axes (some, not all): each group of cells sharing their values is compared within itself.
        ladder_metrics: metrics the ladder section fits besides the main one (a spec with a `ladder:` only).
    """

    equivalence_margin: dict[str, float] = field(default_factory=dict)
    compare_within: tuple[str, ...] = ()
    ladder_metrics: tuple[str, ...] = ()

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def parse(cls, raw: Mapping[str, Any], axes: tuple[str, ...], has_ladder: bool) -> ReportOptions:
        """The options among a spec's top-level keys `raw`, checked against its `axes`."""
        margins = raw.get("equivalence_margin") or {}
        if not isinstance(margins, Mapping) or "equivalence_margin" in raw and not margins:
            raise SpecError(f"equivalence_margin: needs a mapping of metrics to margins, got {margins!r}")
        for metric, margin in margins.items():
            if not _is_metric(metric):
                raise SpecError(f"equivalence_margin: {metric!r} is not a validation or test metric (val/*, test/*)")
            if isinstance(margin, bool) or not isinstance(margin, (int, float)) or margin <= 0:
                raise SpecError(f"equivalence_margin.{metric}: needs a positive number, got {margin!r}")
        within = raw.get("compare_within", [])
        within = [within] if isinstance(within, str) else within
        if not isinstance(within, list) or "compare_within" in raw and not within:
            raise SpecError(f"compare_within: needs an axis or a list of axes, got {raw['compare_within']!r}")
        if within and (not all(n in axes for n in within) or len(within) >= len(axes)):
            raise SpecError(f"compare_within: {within} must be some, not all, of the spec's axes {list(axes)}")
        extra = raw.get("ladder_metrics")
        if extra is not None and not has_ladder:
            raise SpecError("ladder_metrics: only a spec with a `ladder:` has a ladder section to add them to")
        if extra is not None and (not isinstance(extra, list) or not extra or not all(map(_is_metric, extra))):
            raise SpecError(f"ladder_metrics: needs a list of validation or test metrics (val/*, test/*): {extra!r}")
        return cls(dict(margins), tuple(within), tuple(extra or ()))

    def snapshot(self) -> dict[str, Any]:
        """What `sweep.json` keeps (top-level keys, only those set: older files match)."""
        out = {"equivalence_margin": self.equivalence_margin, "compare_within": list(self.compare_within),
               "ladder_metrics": list(self.ladder_metrics)}  # fmt: skip
        return {k: v for k, v in out.items() if v}


@dataclass(frozen=True)
class Pretrained:
    """The `pretrained:` block: `files` (keys -> files of the run) of `spec`'s run `cell`/seed`seed`
    (default: its only cell and seed); `spec` is absolute (`spec_source` resolves it from the file giving it)."""

    spec: str
    files: dict[str, str]
    cell: str | None = None
    seed: int | None = None

    @classmethod
    def parse(cls, raw: Any, lines: Lines) -> Pretrained | None:
        if not raw:
            return None
        raw = known_keys(raw, [f.name for f in fields(cls)], "pretrained", lines, "pretrained")
        missing = [k for k in ("spec", "files") if k not in raw]
        if missing:
            raise SpecError(f"pretrained: needs {missing}: the other spec and the keys that take files of its run")
        if not isinstance(raw["spec"], str):
            raise SpecError(f"pretrained.spec: needs the path of another spec, got {raw['spec']!r}")
        files = raw["files"]
        if (
            not isinstance(files, Mapping)
            or not files
            or not all(isinstance(k, str) and isinstance(f, str) and f for k, f in files.items())
        ):
            raise SpecError(f"pretrained.files: needs keys mapped to files of the run, got {files!r}")
        if raw.get("cell") is not None and not isinstance(raw["cell"], str):
            raise SpecError(f"pretrained.cell: needs a cell name, got {raw['cell']!r}")
        seed = raw.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise SpecError(f"pretrained.seed: needs a seed, got {seed!r}")
        return cls(raw["spec"], dict(files), raw.get("cell"), seed)
