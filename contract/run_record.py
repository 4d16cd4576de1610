"""`run.json`, typed: what a run records of itself (`RunMetadata` writes it; the sweep and the ledger read it).

Schema versions (`schema_version`, the file's first key):
  1  files written before the record had a type (no `schema_version` key). The fields added over time may be
     absent: `processes`, `params_trainable`, `data_splits`, `test_split` (and everything marked during a run).
  2  this record: every field written at fit start is present (`data_splits` and `test_split` may be null).
Fields marked during or after the run (`steps`, `loss_spikes`, `diagnostics`, `test`, ...) are optional in
both: a running or crashed run has not written them yet. So is `plugins`, written at fit start by a run with
plugins only (a run without any, and every older file, has none). A file naming another version is an error
that names the file and the versions understood, as is a missing field, an unknown one, or a value of the wrong type.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from contract.files import write_atomic
from contract.run_folder import RUN_JSON, RunStatus

SCHEMA_KEY = "schema_version"
SCHEMA_VERSION = 2
UNVERSIONED = 1  # a file without `schema_version`
SCHEMA_VERSIONS = (1, 2)
ADDED_IN_2 = ("processes", "params_trainable", "data_splits", "test_split")  # optional in version 1


class RunRecordError(ValueError):
    """A `run.json` this code cannot read; the message is one line naming the file."""


@dataclass(frozen=True)
class ProbeHeadlines:
    """The last diagnostics probe's headlines (`lit_modules.diagnostics_callbacks.Diagnostics`); a model without the
    probed part (no attention) lacks its values."""

    step: int
    attn_max_logit: float | None = None  # the largest raw attention logit over layers (Wortsman et al. 2023)
    logit_mean: float | None = None
    logit_max: float | None = None
    log_z: float | None = None
    residual_growth: float | None = None  # ln(last block's residual RMS / first's)


@dataclass(frozen=True)
class TestRecord:
    """`cli.py test` of the run's checkpoint (`RunMetadata.on_test_end`): the metrics are `test/*` (and the averaged
    weights' `test_avg/*`, `--averaging.kind`)."""

    __test__ = False  # not a pytest class
    checkpoint: str
    step: int
    test_split: str | None
    data_splits: dict[str, str] | None
    metrics: dict[str, float]


@dataclass(frozen=True)
class PluginRecord:
    """A plugin module the run imported (`models.plugins`): its file, the file's SHA-256, and the commit of the git
    repository holding it (`-dirty` unless committed unchanged there; None outside git)."""

    path: str
    sha256: str
    git_commit: str | None = None


@dataclass(frozen=True)
class RunRecord:
    """A run's `run.json`.

    Args:
        status: running, done or diverged (`contract.run_folder.RunStatus`).
        seed: the run's seed (`PL_GLOBAL_SEED`; -1 unset).
        git_commit: the code (`contract.git.git_commit`: `-dirty` when the tree differed from it).
        packages: the installed version of each package that shapes a result.
        data_checksum: SHA-256 of the data; None for a DataModule that has none.
        data_splits: each split's checksum (text and translation data), else None.
        test_split: what `cli.py test` evaluates (text data), else None.
        threads: torch's intra-op threads.
        processes: the trainer's world size.
        params, params_non_embedding, params_trainable, flops_per_token: `TaskModule.model_stats()`.
        loss_spikes, loss_spike_steps: `LossSpikes`' count and the steps the first spikes began at.
        diagnostics: the last probe's headlines.
        diverged_at_step, diverged_loss: `DivergenceGuard`'s record of a diverged run.
        steps: the optimizer steps at the end of fit.
        step_time_ms: the mean wall time of a training step (`lit_modules.step_time.StepTime`).
        test: `cli.py test` of the run's checkpoint.
        plugins: the plugin modules that registered variants (`--plugins`); omitted without any.
        machine: the hardware the numbers came from (`lit_modules.callbacks.machine_facts`): the same commit and
            packages give bit-identical CPU runs on one machine, but not across CPUs, whose kernels round
            differently; omitted by runs from before it was recorded.
    """

    status: RunStatus
    seed: int
    git_commit: str
    packages: dict[str, str]
    data_checksum: str | None
    data_splits: dict[str, str] | None
    test_split: str | None
    threads: int
    processes: int | None
    params: int
    params_non_embedding: int
    params_trainable: int | None
    flops_per_token: float
    # marked during or after the run; omitted from the file while None
    loss_spikes: int | None = None
    loss_spike_steps: tuple[int, ...] | None = None
    diagnostics: ProbeHeadlines | None = None
    diverged_at_step: int | None = None
    diverged_loss: float | None = None
    steps: int | None = None
    step_time_ms: float | None = None
    test: TestRecord | None = None
    plugins: tuple[PluginRecord, ...] | None = None
    machine: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The file's content: `schema_version`, the fields written at fit start, the marked ones that are set."""
        return {SCHEMA_KEY: SCHEMA_VERSION, **_plain(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str | Path = RUN_JSON) -> RunRecord:
        if not isinstance(data, dict):
            raise RunRecordError(f"{source}: not a run record (a JSON object), but {type(data).__name__}")
        version = data.get(SCHEMA_KEY, UNVERSIONED)
        if version not in SCHEMA_VERSIONS:
            raise RunRecordError(
                f"{source}: run.json schema version {version!r} is not one this code reads "
                f"(understood: {', '.join(map(str, SCHEMA_VERSIONS))}); update the suite, or re-run"
            )
        body = {k: v for k, v in data.items() if k != SCHEMA_KEY}
        optional = set(MARKED) | (set(ADDED_IN_2) if version == 1 else set())
        return _build(cls, body, optional, f"{source} (schema version {version})")

    @classmethod
    def from_json(cls, text: str, source: str | Path = RUN_JSON) -> RunRecord:
        try:
            data = json.loads(text)
        except ValueError as err:
            raise RunRecordError(f"{source}: not JSON ({err})") from None
        return cls.from_dict(data, source)

    def write(self, run_dir: Path) -> None:
        write_atomic(Path(run_dir) / RUN_JSON, self.to_json())


MARKED = tuple(f.name for f in fields(RunRecord) if f.default is None)  # optional in every version

# the ledger's columns copied from the record (`experiments.records.ledger`; runs older than a field leave it empty)
RUN_STATS = ("params", "params_non_embedding", "params_trainable", "flops_per_token", "loss_spikes", "step_time_ms")
# the probe headlines the ledger has as `diagnostics/<name>` columns
RUN_DIAGNOSTICS = ("attn_max_logit", "logit_max", "log_z", "residual_growth")
assert {*RUN_STATS} <= {f.name for f in fields(RunRecord)}, "RUN_STATS names a field RunRecord lacks"
assert {*RUN_DIAGNOSTICS} <= {f.name for f in fields(ProbeHeadlines)}, "RUN_DIAGNOSTICS names an unknown headline"


def read_run_record(run_dir: Path) -> RunRecord | None:
    """The run's `run.json`; None when it has none (or one cut short: a reader never sees a half-written one).

    Raises:
        RunRecordError: the file is a record of an unknown schema version, or not a valid one.
    """
    path = Path(run_dir) / RUN_JSON
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return RunRecord.from_dict(data, path)


def _plain(value: Any) -> Any:
    """JSON's values: a dataclass as a dict without its unset optional fields (default None), tuples as lists."""
    if dataclasses.is_dataclass(value):
        pairs = ((f, getattr(value, f.name)) for f in fields(value))
        return {f.name: _plain(v) for f, v in pairs if not (v is None and f.default is None)}
    return [_plain(v) for v in value] if isinstance(value, tuple) else value


def _build(cls: type, data: dict[str, Any], optional: set[str], where: str) -> Any:
    """`cls(**data)`, every field checked against its annotation; one-line errors naming the field."""
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(data) - set(hints))
    missing = [f.name for f in fields(cls) if f.name not in data and f.name not in optional]
    if unknown or missing:
        said = ([f"unknown field(s) {', '.join(unknown)}"] if unknown else []) + (
            [f"missing {', '.join(missing)}"] if missing else []
        )
        raise RunRecordError(f"{where}: {'; '.join(said)} (contract.run_record.{cls.__name__})")
    absent = {f.name: None for f in fields(cls) if f.name not in data}  # only optional ones, checked above
    return cls(**absent, **{key: _value(value, hints[key], f"{where}: {key}") for key, value in data.items()})


def _value(value: Any, kind: Any, where: str) -> Any:
    """`value` as `kind` (dataclasses built, lists made tuples), or a RunRecordError."""
    origin, args = get_origin(kind), get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (kind,) = [a for a in args if a is not type(None)]
        origin, args = get_origin(kind), get_args(kind)
    if dataclasses.is_dataclass(kind) and isinstance(value, dict):
        return _build(kind, value, {f.name for f in fields(kind) if f.default is None}, where)
    if origin is Literal and value in args:
        return value
    if origin is dict and isinstance(value, dict):
        return {k: _value(v, args[1], f"{where}.{k}") for k, v in value.items()}
    if origin is tuple and isinstance(value, list):
        return tuple(_value(v, args[0], f"{where}[]") for v in value)
    plain = {int: (int,), float: (int, float), str: (str,)}.get(kind, ())
    if isinstance(value, plain) and not isinstance(value, bool):
        return value
    raise RunRecordError(f"{where}: {value!r} is not of type {getattr(kind, '__name__', kind)}")
