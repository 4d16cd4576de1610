"""The sweep as TensorBoard shows it: `DIR/_summary/`, a log folder of its own for
`tensorboard --logdir DIR/_summary`.

A folder of its own because `tensorboard --logdir DIR` also finds the runs that a re-run moved to
`DIR/superseded/`, and each run's raw (possibly resumed) event files. The summary holds the ledger's
current runs only, rewritten by every `cli.py report`:

- `.` (the folder itself): the report's tables (Text), its plots (Images), the custom-scalars layout
  (Custom Scalars: one margin chart per metric, one line per cell with its min–max band over seeds,
  and val/loss against evaluation length) and the HParams experiment (columns and their order).
- `<cell>/`: the cell's mean, min and max over its finished runs at each step
  (`across_seeds/<metric>/mean`, `/min`, `/max`) and at each evaluation length
  (`across_seeds/val/loss@length/...`, the length as the step).
- `<cell>/seed<N>/`: the run's metrics (`train/*`, `val/*`; its attempts merged, as the report reads
  them) and its HParams session: the swept axes, cell, seed, status and the run's own hparams; columns that
  differ between runs before constants, the swept axes, cell and seed leading.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

from google.protobuf import struct_pb2
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.custom_scalar import metadata as custom_scalar_metadata
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

from contract.run_folder import DIVERGED, DONE, FAILED
from experiments.analysis.comparison import Analysis, CellResult
from experiments.analysis.plots import seed_band
from experiments.records.events import RunScalars, read_hparams, read_scalars
from experiments.records.layout import SUMMARY_DIR
from experiments.records.ledger import metric_sort_key
from experiments.records.values import format_value

# the cells' aggregate tags, apart from the runs' own; first in Time Series, which opens its first two groups
PREFIX = "across_seeds/"
COPIED = ("train/", "val/")  # the runs' scalars copied into the summary: their metrics
BAND = ("mean", "min", "max")
LENGTH_METRIC = re.compile(r"val/loss@(\d+)")
LENGTH_TAG = "val/loss@length"
STATUS = {DONE: api_pb2.STATUS_SUCCESS, DIVERGED: api_pb2.STATUS_FAILURE, FAILED: api_pb2.STATUS_FAILURE}
COMPARISON = "Cells: mean over seeds against training step (band: min–max over seeds)"
EXTRAPOLATION = "Length extrapolation: final val/loss against evaluation length (x axis: tokens, not steps)"

HParam = bool | float | str


def band_tags(metric: str) -> tuple[str, str, str]:
    """The (mean, min, max) tags of a metric's cell aggregate."""
    return tuple(f"{PREFIX}{metric}/{stat}" for stat in BAND)  # type: ignore[return-value]


class _Writer:
    """One TensorBoard run: an event file in `logdir` (TensorBoard's own writer; no torch needed)."""

    def __init__(self, logdir: Path):
        self._writer = EventFileWriter(str(logdir))

    def value(self, value: summary_pb2.Summary.Value, step: int = 0, wall_time: float | None = None) -> None:
        summary = summary_pb2.Summary(value=[value])
        self._writer.add_event(event_pb2.Event(summary=summary, step=step, wall_time=wall_time or time.time()))

    def scalar(self, tag: str, value: float, step: int, wall_time: float | None = None) -> None:
        self.value(summary_pb2.Summary.Value(tag=tag, simple_value=value), step, wall_time)

    def hparams(self, tag: str, data: plugin_data_pb2.HParamsPluginData, wall_time: float | None = None) -> None:
        meta = hparams_metadata.create_summary_metadata(data)
        self.value(summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=hparams_metadata.NULL_TENSOR), 0, wall_time)

    def close(self) -> None:
        self._writer.close()


def metric_order(analysis: Analysis, metrics: Iterable[str]) -> list[str]:
    """The main metric, its values at each evaluation length (shortest first), the other validation
    metrics, then training ones: the HParams tab shows the first five metrics."""
    main = analysis.main or ""
    return sorted(
        metrics, key=lambda m: (m != main, not m.startswith(main + "@"), not m.startswith("val/"), metric_sort_key(m))
    )


def _png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    return struct.unpack(">II", data[16:24])


def _root(writer: _Writer, markdown: str, figures: Sequence[tuple[str, Path]], out_dir: Path) -> None:
    text = summary_pb2.Summary.Value(
        tag="report/tables",
        metadata=text_metadata.create_summary_metadata(display_name="sweep report", description=""),
        tensor=tensor_util.make_tensor_proto(markdown),
    )
    writer.value(text)
    for caption, path in figures:
        data = (out_dir / path).read_bytes()
        width, height = _png_size(data)
        image = summary_pb2.Summary.Image(height=height, width=width, colorspace=4, encoded_image_string=data)
        meta = summary_pb2.SummaryMetadata(summary_description=caption)  # TensorBoard keeps it as the card's note
        writer.value(summary_pb2.Summary.Value(tag=f"report/{path.stem}", image=image, metadata=meta))


def _layout(metrics: Sequence[str], lengths: bool) -> layout_pb2.Layout:
    """One margin chart per metric (each cell run draws its line and band), and the length chart."""

    def margin(title: str, metric: str) -> layout_pb2.Chart:
        mean, low, high = band_tags(metric)
        series = layout_pb2.MarginChartContent.Series(value=mean, lower=low, upper=high)
        return layout_pb2.Chart(title=title, margin=layout_pb2.MarginChartContent(series=[series]))

    # reversed: TensorBoard's Custom Scalars tab lists a category's charts last first (its tf-dom-repeat
    # inserts each chart before the previous one); the browser test checks the order as shown
    categories = [layout_pb2.Category(title=COMPARISON, chart=[margin(m, m) for m in reversed(metrics)])]
    if lengths:
        chart = margin("val/loss against evaluation length (tokens)", LENGTH_TAG)
        categories.append(layout_pb2.Category(title=EXTRAPOLATION, chart=[chart]))
    return layout_pb2.Layout(category=categories)


def _write_band(writer: _Writer, metric: str, band: Mapping[int, tuple[float, float, float]]) -> None:
    # mean, min and max at the same steps: the margin chart refuses series whose steps differ
    for step, values in band.items():
        for tag, value in zip(band_tags(metric), values):
            writer.scalar(tag, value, step)


def _column_type(values: Iterable[Any]) -> int:
    """One HParams type per column: values of mixed types (`None` beside numbers) make it a string."""
    kinds = {type(v) for v in values}
    if kinds <= {bool}:
        return api_pb2.DATA_TYPE_BOOL
    return api_pb2.DATA_TYPE_FLOAT64 if kinds <= {int, float} else api_pb2.DATA_TYPE_STRING


def _typed(kind: int, value: Any) -> HParam:
    """`value` as its column's HParams type (`_column_type`)."""
    if kind == api_pb2.DATA_TYPE_FLOAT64:
        return float(value)
    if kind == api_pb2.DATA_TYPE_BOOL:
        return bool(value)
    return value if isinstance(value, str) else format_value(value)


def _proto_value(value: HParam) -> struct_pb2.Value:
    """An HParams value as the protobuf `Value` TensorBoard stores."""
    if isinstance(value, bool):
        return struct_pb2.Value(bool_value=value)
    if isinstance(value, float):
        return struct_pb2.Value(number_value=value)
    return struct_pb2.Value(string_value=value)


def _ledger_value(text: str) -> HParam:
    """An axis value as the ledger spells it (`format_value`): numbers and booleans back as such, so that
    the tab sorts and filters them as numbers; anything else (names, lists, null) as written."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, (bool, int, float)) else text


Session = tuple[str, str, dict[str, Any]]  # run (relative to the summary), status, {column: value}


def _sessions(analysis: Analysis, out_dir: Path) -> tuple[list[Session], list[tuple[str, str]], dict[str, RunScalars]]:
    """Every ledger run's session, the columns as (name, shown name) in order, and each run's scalars.

    TensorBoard orders HParams columns by (values differ, name) and shows the first five
    (tensorboard/plugins/hparams/backend_context.py `_sort_and_reduce_to_hparams_limit`), so the
    name of each leading column starts with its rank; the tab shows the name without it.
    """
    leading = [*analysis.axes, "cell", "seed", "status"]
    columns = [(f"{rank:02d} {label}", label) for rank, label in enumerate(leading)]
    sessions, scalars, own = [], {}, set()
    for cell in analysis.cells:
        for row in cell.rows:
            run = f"{cell.name}/seed{row['seed']}"
            run_dir = out_dir / run
            scalars[run] = read_scalars(run_dir)
            values = [_ledger_value(row.get(axis, "")) for axis in analysis.axes]
            values += [cell.name, int(row["seed"]), row["status"]]
            hparams = {name: value for (name, _), value in zip(columns, values)}
            for key, value in read_hparams(run_dir).items():
                # the run's copy of a swept axis (`arch/norm` of `model.arch.norm`) would be a second column
                if f"model.{key.replace('/', '.')}" not in analysis.axes:
                    hparams[key] = value
                    own.add(key)
            sessions.append((run, row["status"], hparams))
    return sessions, columns + [(key, key) for key in sorted(own)], scalars


def _experiment(
    sessions: list[Session], columns: list[tuple[str, str]], metrics: Sequence[str]
) -> tuple[api_pb2.Experiment, list[Session]]:
    """The HParams experiment (columns with type, domain and whether they differ; metrics) and the
    sessions with their values converted to their column's type."""
    kinds = {name: _column_type(h[name] for _, _, h in sessions if name in h) for name, _ in columns}
    sessions = [(run, status, {k: _typed(kinds[k], v) for k, v in h.items()}) for run, status, h in sessions]
    infos = []
    for name, label in columns:
        distinct = sorted({h[name] for _, _, h in sessions if name in h}, key=str)
        info = api_pb2.HParamInfo(name=name, display_name=label, type=kinds[name], differs=len(distinct) > 1)
        if kinds[name] != api_pb2.DATA_TYPE_FLOAT64 or len(distinct) <= 20:  # the tab filters these by ticking
            info.domain_discrete.CopyFrom(struct_pb2.ListValue(values=[_proto_value(v) for v in distinct]))
        infos.append(info)
    metric_infos = [
        api_pb2.MetricInfo(
            name=api_pb2.MetricName(tag=m),
            display_name=m,
            dataset_type=api_pb2.DATASET_VALIDATION if m.startswith("val/") else api_pb2.DATASET_TRAINING,
        )
        for m in metrics
    ]
    return api_pb2.Experiment(hparam_infos=infos, metric_infos=metric_infos), sessions


def _write_cell(writer: _Writer, analysis: Analysis, cell: CellResult, done: Sequence[RunScalars]) -> set[str]:
    """The cell's mean, min and max over its finished runs, against step and against evaluation length.

    Returns:
        The tags given a band (for the layout: no chart without a line).
    """
    written = set()
    for metric in [*analysis.metrics, "train/loss"]:
        band = seed_band([s.curves[metric] for s in done if metric in s.curves])
        _write_band(writer, metric, band)
        written |= {metric} if band else set()
    by_length = {int(match[1]): m for m in analysis.metrics if (match := LENGTH_METRIC.fullmatch(m))}
    band = {}
    for length, metric in sorted(by_length.items()):
        values = list(cell.values(metric).values())  # the ledger's final values, as the report's tables
        if values:
            band[length] = (sum(values) / len(values), min(values), max(values))
    _write_band(writer, LENGTH_TAG, band)
    return written | ({LENGTH_TAG} if band else set())


def _write_run(writer: _Writer, status: str, hparams: Mapping[str, HParam], scalars: RunScalars) -> None:
    """The run's HParams session (start and end) and its metrics, one value per step."""
    times = [t for stamps in scalars.wall_times.values() for t in stamps.values()]
    start = plugin_data_pb2.SessionStartInfo(start_time_secs=min(times, default=0.0))
    for name, value in hparams.items():
        start.hparams[name].CopyFrom(_proto_value(value))
    session = plugin_data_pb2.HParamsPluginData(session_start_info=start)
    writer.hparams(hparams_metadata.SESSION_START_INFO_TAG, session, wall_time=start.start_time_secs or None)
    for tag, curve in scalars.curves.items():
        if not tag.startswith(COPIED):
            continue
        for step, value in sorted(curve.items()):
            # left out: the NaN placeholders a run logs at step 0 to name its HParams metrics
            # (lit_modules/base.py), else a metric never measured (learned positions past their table)
            # would show NaN rather than nothing
            if step or math.isfinite(value):
                writer.scalar(tag, value, step, scalars.wall_times[tag][step])
    end = plugin_data_pb2.SessionEndInfo(status=STATUS.get(status, api_pb2.STATUS_UNKNOWN))
    end.end_time_secs = max(times, default=0.0)
    writer.hparams(hparams_metadata.SESSION_END_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_end_info=end),
                   wall_time=end.end_time_secs or None)  # fmt: skip


def write_summary(out_dir: Path, analysis: Analysis, markdown: str, figures: Sequence[tuple[str, Path]]) -> Path:
    """Rewrites `DIR/_summary/` (it holds nothing but this summary).

    Args:
        out_dir: the sweep's folder.
        analysis: the sweep's cells, runs (ledger rows) and metrics.
        markdown: the report's text (header and tables).
        figures: the report's plots, (caption, path relative to `out_dir`).

    Returns:
        The summary folder.
    """
    # built aside, then swapped in: two sweeps sharing a folder may report at once, and a reader
    # (TensorBoard) should never see a half-written summary; a rewrite never adds duplicate sessions
    final = out_dir / SUMMARY_DIR
    root = out_dir / f".{SUMMARY_DIR}.{os.getpid()}.tmp"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    sessions, columns, scalars = _sessions(analysis, out_dir)
    charted: set[str] = set()
    for cell in analysis.cells:
        done = [scalars[f"{cell.name}/seed{r['seed']}"] for r in cell.rows if r["status"] == DONE]
        with closing(_Writer(root / cell.name)) as writer:
            charted |= _write_cell(writer, analysis, cell, done)
    copied = {tag for s in scalars.values() for tag in s.curves if tag.startswith(COPIED)}
    experiment, sessions = _experiment(sessions, columns, metric_order(analysis, copied))
    for run, status, hparams in sessions:
        with closing(_Writer(root / run)) as writer:
            _write_run(writer, status, hparams, scalars[run])
    with closing(_Writer(root)) as writer:
        _root(writer, markdown, figures, out_dir)
        layout = _layout(metric_order(analysis, charted - {LENGTH_TAG}), LENGTH_TAG in charted)
        writer.value(summary_pb2.Summary.Value(
            tag=custom_scalar_metadata.CONFIG_SUMMARY_TAG, metadata=custom_scalar_metadata.create_summary_metadata(),
            tensor=tensor_util.make_tensor_proto(layout.SerializeToString())))  # fmt: skip
        writer.hparams(hparams_metadata.EXPERIMENT_TAG, plugin_data_pb2.HParamsPluginData(experiment=experiment))
    _swap_in(root, final)
    return final


def _swap_in(built: Path, final: Path) -> None:
    """Replaces the folder `final` by `built`. When another report swaps its own in at the same moment,
    one of the two (built from the same ledger) stays and the other is removed."""
    old = final.with_name(f".{final.name}.{os.getpid()}.old")
    try:
        final.rename(old)
    except FileNotFoundError:
        pass
    try:
        built.rename(final)
    except OSError:  # the other report's summary took the place first
        shutil.rmtree(built, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
