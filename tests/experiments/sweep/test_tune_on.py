"""`tune.search_on`: only the cells with the named grid values search; every other cell runs its seeds at the point
its counterpart chose (SCAN: the learning rate tuned in distribution, then every split trained at it).
Without training: the runs a tuned sweep asks for are a function of its ledger (`expand.tuned_runs`)."""

from __future__ import annotations

import pytest

from experiments.records.ledger import Ledger
from experiments.sweep.expand import tuned_runs
from experiments.sweep.spec import SpecError, load_spec
from experiments.sweep.validate import CheckedCell

GRID = {"model.arch.pos_encoding": ["rope", "alibi"], "model.arch.norm": ["layernorm", "rmsnorm"]}
TUNE = {
    "grid": {"model.optim.lr": [0.001, 0.003, 0.01, 0.03]},
    "extend": 1,
    "search_on": {"model.arch.norm": "layernorm"},
}


def runs_for(spec, ledger, tmp_path):
    checked = {c.name: CheckedCell(c, (), dict(c.overrides)) for c in spec.cells}
    return tuned_runs(spec, checked, tmp_path / "out", {c.name: 1 for c in spec.cells}, ledger)[0]


def test_only_the_named_cells_search_and_the_others_take_their_choice(tmp_path, tiny_spec):
    spec = load_spec(tiny_spec(tmp_path / "s.yaml", {"data.test_split": "held_out"}, grid=GRID, seeds=[0, 1],
                               tune=TUNE))  # fmt: skip
    ledger = Ledger(tmp_path / "results.csv", spec.ledger_axes)
    first = runs_for(spec, ledger, tmp_path)
    searched = {"pos_encoding=rope,norm=layernorm", "pos_encoding=alibi,norm=layernorm"}
    assert {r.cell.split("~")[0] for r in first} == searched
    assert all("~" in r.cell for r in first)  # nothing chosen yet: search runs only
    chosen = {"rope": 0.003, "alibi": 0.01}
    for run in first:  # a valley at each scheme's chosen lr
        scheme = run.cell.split(",")[0].split("=")[1]
        lr = float(run.cell.rpartition("lr=")[2])
        loss = repr(abs(lr - chosen[scheme]))
        ledger.put({"cell": run.cell, "seed": str(run.seed), "status": "done", "val/loss": loss})
    final = [r for r in runs_for(spec, ledger, tmp_path) if "~" not in r.cell]
    assert {(r.cell, r.seed) for r in final} == {(c.name, s) for c in spec.cells for s in (0, 1)}
    for run in final:
        lr = dict(run.columns)["model.optim.lr"]
        assert float(lr) == chosen[run.cell.split(",")[0].split("=")[1]]  # rmsnorm cells at layernorm's choice
        assert f"--model.optim.lr={lr}" in run.args


@pytest.mark.parametrize(
    "on, message",
    [
        ({"model.arch.norm": "dyt"}, "not a value of a varied key"),
        ({"model.optim.warmup_steps": 0}, "not a value of a varied key"),
    ],
)
def test_a_tune_on_without_matching_cells_is_refused(tmp_path, tiny_spec, on, message):
    path = tiny_spec(tmp_path / "s.yaml", {"data.test_split": "held_out"}, grid=GRID, tune=TUNE | {"search_on": on})
    with pytest.raises(SpecError, match=message):
        load_spec(path)


def test_a_cell_without_a_counterpart_is_refused(tmp_path, tiny_spec):
    cells = [{"name": "a", "model.arch.norm": "layernorm", "model.arch.pos_encoding": "rope"},
             {"name": "b", "model.arch.norm": "rmsnorm", "model.arch.pos_encoding": "alibi"}]  # fmt: skip
    path = tiny_spec(tmp_path / "s.yaml", {"data.test_split": "held_out"}, cells=cells, tune=TUNE)
    with pytest.raises(SpecError, match="cell 'b' has no counterpart"):
        load_spec(path)
