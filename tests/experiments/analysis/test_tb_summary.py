"""`DIR/_summary`, read back by TensorBoard's own plugins (in-process, as its server would answer the
browser): the cell-comparison charts and their values, the report as text and images, HParams
columns in the order the tab shows them, complete per-run sessions, and no superseded run."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from google.protobuf import json_format
from tensorboard import context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.custom_scalar.custom_scalars_plugin import CustomScalarsPlugin
from tensorboard.plugins.hparams import api_pb2, get_experiment, hparams_plugin, list_session_groups
from tensorboard.plugins.scalar.scalars_plugin import ScalarsPlugin
from tensorboard.plugins.text.text_plugin import TextPlugin

from experiments.analysis import sweep_report as report
from experiments.analysis import tb_summary
from tests.experiments.analysis.conftest import AXIS, CELLS, FAILED, LENGTHS, SEEDS, VAL_STEPS

CTX = context.RequestContext()


class Served:
    """TensorBoard's plugins on a log folder, as `tensorboard --logdir` would load it."""

    def __init__(self, logdir):
        self.mux = plugin_event_multiplexer.EventMultiplexer()
        self.mux.AddRunsFromDirectory(str(logdir))
        self.mux.Reload()
        self.provider = data_provider.MultiplexerDataProvider(self.mux, str(logdir))
        plugins: dict = {}
        tb = base_plugin.TBContext(logdir=str(logdir), data_provider=self.provider, multiplexer=self.mux,
                                   plugin_name_to_instance=plugins)  # fmt: skip
        plugins["scalars"] = ScalarsPlugin(tb)
        self.custom = CustomScalarsPlugin(tb)
        self.hparams = hparams_plugin.HParamsPlugin(tb)._context
        self.text = TextPlugin(tb)

    def layout(self) -> layout_pb2.Layout:
        """The custom-scalars layout, merged over runs, as served to the dashboard."""
        return json_format.Parse(self.custom.layout_impl(CTX, ""), layout_pb2.Layout())

    def runs(self) -> set[str]:
        return set(self.mux.Runs())

    def margin(self, run: str, series) -> dict[str, dict[int, float]]:
        """What a margin chart loads for one run: tag -> {step: value}."""
        tags = [series.value, series.lower, series.upper]
        answer = self.custom.scalars_impl(CTX, run, "|".join(f"({re.escape(t)})" for t in tags), "")
        return {tag: {int(step): value for _, step, value in events} for tag, events in answer["tag_to_events"].items()}

    def experiment(self) -> api_pb2.Experiment:
        return get_experiment.Handler(CTX, self.hparams, "", api_pb2.GetExperimentRequest()).run()

    def session_groups(self) -> list[api_pb2.SessionGroup]:
        request = api_pb2.ListSessionGroupsRequest(
            allowed_statuses=[api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS, api_pb2.STATUS_FAILURE,
                              api_pb2.STATUS_RUNNING],
            start_index=0, slice_size=100,
        )  # fmt: skip
        return list(list_session_groups.Handler(CTX, self.hparams, "", request).run().session_groups)


@pytest.fixture(scope="module")
def served(finished_sweep):
    return Served(finished_sweep.dir / "_summary")


def test_cell_comparison_charts_hold_each_cells_mean_min_and_max(finished_sweep, served):
    layout = served.layout()
    comparison, lengths = layout.category
    assert comparison.title == tb_summary.COMPARISON and lengths.title == tb_summary.EXTRAPOLATION
    # stored last first: TensorBoard shows a category's charts in reverse (the browser test sees them)
    shown = [chart.title for chart in reversed(comparison.chart)]
    assert shown == ["val/loss", *(f"val/loss@{n}" for n in LENGTHS), "train/loss"]
    checked = 0
    for chart in comparison.chart:
        (series,) = chart.margin.series
        assert (series.value, series.lower, series.upper) == tb_summary.band_tags(chart.title)
        for cell in CELLS:
            runs = [c[chart.title] for c in finished_sweep.done(cell) if chart.title in c]
            loaded = served.margin(cell, series)
            if not runs:  # learned positions at 32: no line rather than an empty one
                assert loaded == {}
                continue
            steps = sorted({s for r in runs for s in r})
            values = np.array([[r[s] for r in runs] for s in steps])  # every done run logs every step here
            assert sorted(loaded[series.value]) == steps
            for tag, expected in zip(tb_summary.band_tags(chart.title), (values.mean(1), values.min(1), values.max(1))):
                assert [loaded[tag][s] for s in steps] == pytest.approx(expected, rel=1e-6)
            checked += 1
    assert checked == 7  # 4 charts x 2 cells, less learned's @32


def test_loss_against_evaluation_length_is_a_chart(finished_sweep, served):
    (chart,) = served.layout().category[1].chart
    (series,) = chart.margin.series
    for cell in CELLS:
        loaded = served.margin(cell, series)
        finals = {n: [c[f"val/loss@{n}"][max(VAL_STEPS)] for c in finished_sweep.done(cell) if f"val/loss@{n}" in c]
                  for n in LENGTHS}  # fmt: skip
        finals = {n: v for n, v in finals.items() if v}
        assert sorted(loaded[series.value]) == sorted(finals)  # the evaluation length as the step
        for n, values in finals.items():
            mean, low, high = (loaded[t][n] for t in tb_summary.band_tags(tb_summary.LENGTH_TAG))
            assert (mean, low, high) == pytest.approx((np.mean(values), min(values), max(values)), rel=1e-6)


def test_report_tables_as_text_and_plots_as_images(finished_sweep, served):
    (text,) = served.text.text_impl(CTX, ".", "report/tables", "", enable_markdown=True)
    html = text["text"]
    # the report's header and every metric's table, rendered as HTML tables with one row per cell
    assert "Sweep report" in html and html.count("<table>") == 1 + len(LENGTHS)  # val/loss, val/loss@16, @32
    assert html.count("<code>pos_encoding=learned</code>") == html.count("<table>")
    images = served.provider.list_blob_sequences(CTX, experiment_id="", plugin_name="images")["."]
    plots = {p.stem: p for p in (finished_sweep.dir / "plots").glob("*.png")}
    assert sorted(images) == [f"report/{p}" for p in sorted(plots)] == [
        "report/length_extrapolation", "report/train_loss", "report/val_loss"]  # fmt: skip
    for name, path in plots.items():
        assert images[f"report/{name}"].description  # the report's caption
        (datum,) = served.provider.read_blob_sequences(
            CTX, experiment_id="", plugin_name="images", run_tag_filter=None, downsample=1
        )["."][f"report/{name}"]
        assert served.provider.read_blob(CTX, blob_key=datum.values[2].blob_key) == path.read_bytes()  # [w, h, png]


def test_hparams_columns_swept_axes_first_constants_last(served):
    experiment = served.experiment()  # in the order TensorBoard serves them (it sorts by differs, name)
    shown = [(h.display_name or h.name, h.differs) for h in experiment.hparam_infos]
    # the five columns shown by default: status differs here (a run failed), then a statistic that does
    assert [name for name, _ in shown[:5]] == [AXIS, "cell", "seed", "status", "params"]
    assert [differs for _, differs in shown[:5]] == [True] * 5
    constants = [name for name, differs in shown if not differs]
    assert set(constants) == {"arch/d_model", "arch/norm", "arch/attn_scale", "optim/lr", "flops_per_token"}
    assert [differs for _, differs in shown] == sorted((d for _, d in shown), reverse=True)  # constants last
    assert "arch/pos_encoding" not in dict(shown)  # the swept axis once, under its spec name
    metrics = [m.name.tag for m in experiment.metric_infos]
    assert metrics == ["val/loss", *(f"val/loss@{n}" for n in LENGTHS), "train/loss"]  # every evaluation length


def test_every_run_is_a_complete_session_and_no_cell_is_one(finished_sweep, served):
    experiment = served.experiment()
    label = {h.name: h.display_name or h.name for h in experiment.hparam_infos}
    groups = served.session_groups()
    assert sorted(g.name for g in groups) == sorted(f"{c}/seed{s}" for c in CELLS for s in SEEDS)
    for group in groups:
        (session,) = group.sessions
        hparams = {label[k]: v for k, v in group.hparams.items()}
        assert set(hparams) == set(label.values())  # complete: no empty column
        cell, seed = group.name.split("/seed")
        assert hparams["cell"].string_value == cell and hparams["seed"].number_value == int(seed)
        assert hparams[AXIS].string_value == CELLS[cell]
        failed = (cell, int(seed)) == FAILED
        assert session.status == (api_pb2.STATUS_FAILURE if failed else api_pb2.STATUS_SUCCESS)
        assert hparams["status"].string_value == ("failed" if failed else "done")
        logged = finished_sweep.curves[(cell, int(seed))]
        values = {m.name.tag: m.value for m in session.metric_values}
        assert values == pytest.approx({tag: points[max(points)] for tag, points in logged.items()}, rel=1e-6)


def test_summary_holds_current_runs_only(finished_sweep, served):
    """`tensorboard --logdir DIR/_summary`: the ledger's runs, the cells' aggregates, the sweep; nothing
    from `superseded/` (which `--logdir DIR` would show)."""
    cells = set(CELLS)
    assert served.runs() == {"."} | cells | {f"{c}/seed{s}" for c in cells for s in SEEDS}
    assert "superseded/20260101-000000/pos_encoding=alibi/seed0" in Served(finished_sweep.dir).runs()


def test_a_second_report_rewrites_the_summary(finished_sweep):
    before = sorted(p.relative_to(finished_sweep.dir) for p in (finished_sweep.dir / "_summary").rglob("events*"))
    report.build_report(finished_sweep.dir)
    after = sorted(p.relative_to(finished_sweep.dir) for p in (finished_sweep.dir / "_summary").rglob("events*"))
    assert len(after) == len(before) == 1 + len(CELLS) * (1 + len(SEEDS))  # one event file per run, no duplicates


def test_numeric_axes_are_numeric_columns(tmp_path):
    """The ledger spells values as text; numbers come back as numbers (sorted and filtered as such), and a
    sweep whose runs left no event files still gets one complete session per run."""
    with (tmp_path / "results.csv").open("w") as f:
        f.write("cell,seed,status,model.optim.lr,model.arch.bias,val/loss\n")
        for i, (lr, bias) in enumerate([("0.001", "true"), ("0.01", "false")]):
            f.write(f"lr={lr},0,done,{lr},{bias},{2 + i}\nlr={lr},1,done,{lr},{bias},{2.1 + i}\n")
    cells = [{"name": f"lr={lr}", "overrides": {"model.optim.lr": float(lr)}} for lr in ("0.001", "0.01")]
    info = {"axes": ["model.optim.lr", "model.arch.bias"], "cells": cells}
    (tmp_path / "sweep.json").write_text(json.dumps(info))
    report.build_report(tmp_path)
    served = Served(tmp_path / "_summary")
    infos = {h.display_name: h for h in served.experiment().hparam_infos}
    assert infos["model.optim.lr"].type == api_pb2.DATA_TYPE_FLOAT64
    assert [v.number_value for v in infos["model.optim.lr"].domain_discrete.values] == [0.001, 0.01]
    assert infos["model.arch.bias"].type == api_pb2.DATA_TYPE_BOOL
    groups = served.session_groups()
    assert len(groups) == 4 and all(len(g.hparams) == len(infos) for g in groups)
