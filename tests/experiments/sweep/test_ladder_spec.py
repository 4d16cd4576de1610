"""`ladder:` in a spec (`experiments.sweep.ladder`): every cell at every size, each a cell of the sweep (so a
ladder resumes, claims and tunes like any sweep); the report learns each cell's (cell, size)."""

from __future__ import annotations

import csv

import pytest
import yaml

from experiments.sweep.spec import SpecError, load_spec
from tests.conftest import BASE, FIXED

GRID = {"model.arch.pos_encoding": ["rope", "alibi"]}
LADDER = [
    {"name": "d32", "model.arch.d_model": 32, "model.arch.n_heads": 2},
    {"name": "d64", "model.arch.d_model": 64, "model.arch.n_heads": 4},
]


def ladder_spec(path, grid=GRID, **entries):
    """The tiny spec without its fixed width (the ladder sets it)."""
    fixed = {k: v for k, v in FIXED.items() if k != "model.arch.d_model"}
    path.write_text(yaml.safe_dump({"base": BASE, "fixed": fixed, "grid": grid} | entries, sort_keys=False))
    return path


def test_every_cell_runs_at_every_size_and_is_compared_within_its_size(tmp_path):
    spec = load_spec(ladder_spec(tmp_path / "s.yaml", ladder=LADDER, baseline="pos_encoding=rope"))
    assert [c.name for c in spec.cells] == [
        "pos_encoding=rope,size=d32", "pos_encoding=alibi,size=d32",
        "pos_encoding=rope,size=d64", "pos_encoding=alibi,size=d64",
    ]  # fmt: skip
    assert spec.cell_by_name["pos_encoding=alibi,size=d64"].overrides == {
        "model.arch.pos_encoding": "alibi", "model.arch.d_model": 64, "model.arch.n_heads": 4,
    }  # fmt: skip
    assert spec.axes == ("model.arch.pos_encoding", "model.arch.d_model", "model.arch.n_heads")
    assert spec.baseline == "pos_encoding=rope,size=d32"
    snapshot = spec.snapshot()
    assert snapshot["compare_within"] == ["model.arch.d_model", "model.arch.n_heads"]
    assert snapshot["ladder"]["cells"]["pos_encoding=alibi,size=d64"] == ["pos_encoding=alibi", "d64"]
    assert [s["name"] for s in snapshot["ladder"]["sizes"]] == ["d32", "d64"]


@pytest.mark.parametrize(
    "ladder, message",
    [
        (LADDER[:1], "at least 2 sizes"),
        ([LADDER[0], {"name": "d64", "model.arch.d_model": 64}], "every size sets the same keys"),
        ([LADDER[0], LADDER[0]], "size names repeat"),
        ([{"model.arch.n_heads": 2}, LADDER[1]], "needs a `name:`"),
        ([{"name": "d32", "trainer.max_steps": 12}, {"name": "d64", "trainer.max_steps": 24}], "also fixed or varied"),
    ],
)
def test_a_bad_ladder_names_the_problem(tmp_path, ladder, message):
    with pytest.raises(SpecError, match=message):
        load_spec(ladder_spec(tmp_path / "s.yaml", ladder=ladder))


def test_ladder_metrics_are_kept_for_the_report_and_checked(tmp_path):
    spec = load_spec(ladder_spec(tmp_path / "s.yaml", ladder=LADDER, ladder_metrics=["val/loss@64"]))
    assert spec.snapshot()["ladder_metrics"] == ["val/loss@64"]
    with pytest.raises(SpecError, match="only a spec with a `ladder:`"):
        load_spec(ladder_spec(tmp_path / "s.yaml", ladder_metrics=["val/loss@64"]))
    with pytest.raises(SpecError, match=r"ladder_metrics: needs a list of validation or test metrics"):
        load_spec(ladder_spec(tmp_path / "s.yaml", ladder=LADDER, ladder_metrics=["train/loss"]))


def test_a_ladder_sweep_trains_every_size_and_reports_the_ladder(tmp_path):
    """End to end, 2 sizes × 1 cell × 1 seed of the tiny GPT through the engine: the ledger carries each run's
    own size, the report's data its Ladder table, and its Markdown the section (two sizes cannot fit three
    parameters: said, not hidden)."""
    from experiments.analysis.sweep_report import build_report, ladder_results
    from experiments.sweep import run_sweep

    ladder = [{"name": "d16", "model.arch.d_model": 16}, {"name": "d32", "model.arch.d_model": 32}]
    grid = {"model.arch.pos_encoding": ["rope"]}
    path = ladder_spec(tmp_path / "s.yaml", grid, ladder=ladder, seeds=[0], checkpoint_every=6)
    outcome = run_sweep(path, tmp_path / "out", threads=1)
    assert outcome.runs == {"done": ("pos_encoding=rope,size=d16/seed0", "pos_encoding=rope,size=d32/seed0")}
    rows = {r["cell"]: r for r in csv.DictReader(open(outcome.ledger))}
    small, large = (float(rows[f"pos_encoding=rope,size={s}"]["params_non_embedding"]) for s in ("d16", "d32"))
    assert rows["pos_encoding=rope,size=d32"]["model.arch.d_model"] == "32" and large > 3 * small
    (table,) = ladder_results(outcome.out_dir)
    assert table.metric == "val/loss" and table.sizes == ("d16", "d32") and table.baseline == "pos_encoding=rope"
    (row,) = table.rows
    assert row.cell == "pos_encoding=rope" and row.fit is None  # 2 sizes, 3 parameters
    assert row.sizes["d32"].params == large
    assert row.sizes["d16"].mean == float(rows["pos_encoding=rope,size=d16"]["val/loss"])
    build_report(outcome.out_dir)
    report = (outcome.out_dir / "report.md").read_text()
    assert "## Ladder" in report and "no fit (fewer sizes than parameters" in report
    assert (outcome.out_dir / "plots" / "ladder_params.png").exists()
