"""Two optional blocks of a spec, each checked on its own: `launcher:` (the resources of scheduler jobs)
and the report's options (`equivalence_margin`, `compare_within`, `ladder_metrics`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from experiments.sweep.errors import SpecError

# the `launcher:` block: resources of each job of `--launcher slurm` (and `local`: timeout_min, gpus_per_node);
# nodes and tasks per node come from each run's trainer.num_nodes and trainer.devices
LAUNCHER_KEYS: dict[str, tuple[type, ...]] = {
    "partition": (str,),
    "nodes": (int,),
    "tasks_per_node": (int,),
    "gpus_per_node": (int,),
    "cpus_per_task": (int,),
    "timeout_min": (int,),
    "mem_gb": (int, float),
    "slurm_array_parallelism": (int,),
    "slurm_additional_parameters": (dict,),  # any sbatch option: {account: me, qos: high, constraint: a100}
    "slurm_setup": (list,),  # shell lines run before the job's tasks: module load ..., source .venv/bin/activate
}


def report_options(raw: Mapping[str, Any], axes: tuple[str, ...]) -> dict[str, Any]:
    """The report's options, checked: `equivalence_margin` maps `val/*` metrics to positive margins;
    `compare_within` names one axis or a list of axes of this spec (fewer than all of them)."""
    out: dict[str, Any] = {}
    margins = raw.get("equivalence_margin")
    if margins is not None:
        if not isinstance(margins, Mapping) or not margins:
            raise SpecError(f"equivalence_margin: needs a mapping of metrics to margins, got {margins!r}")
        for metric, margin in margins.items():
            if not (isinstance(metric, str) and metric.startswith(("val/", "test/"))):
                raise SpecError(f"equivalence_margin: {metric!r} is not a validation or test metric (val/*, test/*)")
            if isinstance(margin, bool) or not isinstance(margin, (int, float)) or margin <= 0:
                raise SpecError(f"equivalence_margin.{metric}: needs a positive number, got {margin!r}")
        out["equivalence_margin"] = dict(margins)
    within = raw.get("compare_within")
    if within is not None:
        names = [within] if isinstance(within, str) else within
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise SpecError(f"compare_within: needs an axis or a list of axes, got {within!r}")
        unknown = [n for n in names if n not in axes]
        if unknown or len(names) >= len(axes):
            raise SpecError(f"compare_within: {names} must be some, not all, of the spec's axes {list(axes)}")
        out["compare_within"] = names
    extra = raw.get("ladder_metrics")
    if extra is not None:
        if not raw.get("ladder"):
            raise SpecError("ladder_metrics: only a spec with a `ladder:` has a ladder section to add them to")
        if not isinstance(extra, list) or not extra or not all(
            isinstance(m, str) and m.startswith(("val/", "test/")) for m in extra
        ):
            raise SpecError(f"ladder_metrics: needs a list of validation or test metrics (val/*, test/*): {extra!r}")
        out["ladder_metrics"] = list(extra)
    return out


def launcher_block(value: Any) -> dict[str, Any]:
    """The `launcher:` block, checked key by key; other `slurm_*` keys pass to submitit, which checks them."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(f"launcher: needs a mapping of job resources, got {value!r}")
    for key, item in value.items():
        if key not in LAUNCHER_KEYS:
            if isinstance(key, str) and key.startswith("slurm_"):
                continue
            raise SpecError(f"launcher: unknown key {key!r}; valid keys: {list(LAUNCHER_KEYS)} and other slurm_* keys")
        kinds = LAUNCHER_KEYS[key]
        if not isinstance(item, kinds) or isinstance(item, bool):
            raise SpecError(f"launcher.{key}: needs {' or '.join(k.__name__ for k in kinds)}, got {item!r}")
        if isinstance(item, (int, float)) and item <= 0:
            raise SpecError(f"launcher.{key}: needs a positive number, got {item!r}")
    if not all(isinstance(k, str) for k in value.get("slurm_additional_parameters", {})):
        raise SpecError("launcher.slurm_additional_parameters: keys must be sbatch option names")
    if not all(isinstance(line, str) for line in value.get("slurm_setup", [])):
        raise SpecError("launcher.slurm_setup: needs a list of shell lines")
    return dict(value)
