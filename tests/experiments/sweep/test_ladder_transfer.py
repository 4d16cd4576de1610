"""`tune.transfer` in a ladder spec (`experiments.sweep.transfer`): the block and its errors, and the runs it asks for
without training (`expand.tuned_runs` is a function of the ledger): only the `from` size searches, the other sizes
run at the transferred (with a rule, scaled) value, and the largest size adds its verify runs."""

from __future__ import annotations

import pytest

from experiments.records.ledger import Ledger
from experiments.sweep.expand import tuned_runs
from experiments.sweep.spec import SpecError, load_spec
from experiments.sweep.tuning import extension_rule
from experiments.sweep.validate import CheckedCell
from tests.experiments.sweep.test_ladder_spec import ladder_spec

GRID = {"model.arch.pos_encoding": ["rope", "alibi"]}
LADDER = [
    {"name": "d32", "model.arch.d_model": 32, "model.arch.n_heads": 2},
    {"name": "d64", "model.arch.d_model": 64, "model.arch.n_heads": 4},
    {"name": "d128", "model.arch.d_model": 128, "model.arch.n_heads": 4},
]
LR = "model.optim.lr"
SP_RULE = {LR: {"with": "model.arch.d_model", "power": -1}}


def transfer_spec(path, transfer, **tune):
    """Two cells on three sizes, tuned once: seeds 0 and 1, tune seeds 0 and 2 (2 is not a spec seed)."""
    block = {"grid": {LR: [0.001, 0.002, 0.004]}, "extend": 1, "seeds": [0, 2]} | tune | {"transfer": transfer}
    return load_spec(ladder_spec(path, GRID, ladder=LADDER, seeds=[0, 1], tune=block))


def runs_for(spec, ledger, tmp_path):
    checked = {c.name: CheckedCell(c, (), dict(c.overrides)) for c in spec.cells}
    return tuned_runs(spec, checked, tmp_path / "out", {c.name: 1 for c in spec.cells}, ledger)[0]


def search_and_choose(spec, ledger, tmp_path, chosen: float):
    """Runs every pending search run (a valley at `chosen`) until no run the ledger asks for is a search run."""
    while pending := [r for r in runs_for(spec, ledger, tmp_path) if dict(r.columns)["phase"] == "search"
                      and not ledger.get(r.cell, r.seed)]:  # fmt: skip
        for run in pending:
            loss = abs(float(dict(run.columns)[LR]) - chosen)
            ledger.put({"cell": run.cell, "seed": str(run.seed), "status": "done", "val/loss": repr(loss)})
    return runs_for(spec, ledger, tmp_path)


def by_phase(runs, phase):
    return [r for r in runs if dict(r.columns)["phase"] == phase]


def test_the_block_and_its_defaults(tmp_path):
    spec = transfer_spec(tmp_path / "s.yaml", {"from": "d64", "rule": SP_RULE, "verify": [2, 1, 0.5]})
    transfer = spec.tune.transfer
    assert (transfer.source.name, transfer.top.name, transfer.verify) == ("d64", "d128", (0.5, 1.0, 2.0))
    assert [(r.key, r.with_key, r.power) for r in transfer.rules] == [(LR, "model.arch.d_model", -1.0)]
    rule = {LR: {"with": "model.arch.d_model", "power": -1.0}}
    snapshot = spec.snapshot()["tune"]["transfer"]  # what sweep.json keeps for the report
    assert snapshot == {"from": "d64", "top": "d128", "verify": [0.5, 1.0, 2.0], "rule": rule}
    assert "only the cells at size d64 search" in extension_rule(spec.tune)  # what --dry-run prints
    default = transfer_spec(tmp_path / "d.yaml", None).tune.transfer  # `transfer:` alone
    assert (default.source.name, default.rules, default.verify) == ("d32", (), (0.5, 1.0, 2.0))
    assert "unchanged" in extension_rule(transfer_spec(tmp_path / "e.yaml", {}).tune)


@pytest.mark.parametrize(
    "transfer, message",
    [
        ({"from": "d99"}, r"transfer.from: 'd99' is not a size of the ladder; its sizes: \['d32', 'd64', 'd128'\]"),
        ({"from": "d128"}, "is the largest size, where the transfer is verified"),
        (
            {"form": "d32"},
            r"tune.transfer: unknown key\(s\) \['form'\]; did you mean 'from'\?; "
            r"valid keys: \['from', 'rule', 'verify'\]",
        ),
        ({"rule": {"optim.wd": SP_RULE[LR]}}, r"'optim.wd' is not a tuned key; tuned: \['model.optim.lr'\]"),
        ({"rule": {LR: {"with": "model.arch.n_layers", "power": -1}}}, "not a key the ladder sets"),
        ({"rule": {LR: {"with": "model.arch.d_model", "power": "-1"}}}, r"rule.model.optim.lr.power: needs a number"),
        ({"rule": {LR: {"with": "model.arch.d_model"}}}, r"needs \{with: <size key>, power: <number>\}"),
        ({"verify": [0.5, 2]}, "needs distinct positive factors including 1"),
        ({"verify": [1]}, "including 1 and another"),
        ({"verify": [-1, 1]}, "positive factors"),
        (True, "tune.transfer: needs a mapping"),
    ],
)
def test_a_bad_transfer_names_the_problem(tmp_path, transfer, message):
    with pytest.raises(SpecError, match=message):
        transfer_spec(tmp_path / "s.yaml", transfer)


def test_a_rule_needs_a_number_at_every_size(tmp_path):
    ladder = [{"name": n, "model.arch.norm": v, "model.arch.d_model": 32} for n, v in (("a", "layernorm"),
                                                                                        ("b", "rmsnorm"))]  # fmt: skip
    tune = {"grid": {LR: [0.001, 0.002]}, "transfer": {"rule": {LR: {"with": "model.arch.norm", "power": 1}}}}
    with pytest.raises(SpecError, match=r"with: model.arch.norm needs a positive number at every size"):
        load_spec(ladder_spec(tmp_path / "s.yaml", GRID, ladder=ladder, tune=tune))


def test_transfer_needs_a_ladder(tmp_path, tiny_spec):
    path = tiny_spec(tmp_path / "s.yaml", grid=GRID, tune={"grid": {LR: [0.001, 0.002]}, "transfer": {}})
    with pytest.raises(SpecError, match=r"s.yaml:\d+: tune.transfer: carries a search between the sizes of a "
                                        r"`ladder:`; add a ladder, or drop tune.transfer"):  # fmt: skip
        load_spec(path)


def test_only_the_from_size_searches_and_the_others_run_the_scaled_choice(tmp_path):
    spec = transfer_spec(tmp_path / "s.yaml", {"rule": SP_RULE})
    ledger = Ledger(tmp_path / "results.csv", spec.ledger_axes)
    first = runs_for(spec, ledger, tmp_path)
    assert {r.cell.split("~")[0] for r in first} == {"pos_encoding=rope,size=d32", "pos_encoding=alibi,size=d32"}
    assert by_phase(first, "search") == first and {r.seed for r in first} == {0, 2}
    runs = search_and_choose(spec, ledger, tmp_path, chosen=0.002)  # inside the grid: bracketed, no extension
    assert not any("size=d32" not in r.cell for r in by_phase(runs, "search"))
    final = {(r.cell, r.seed): r for r in by_phase(runs, "final")}
    assert set(final) == {(c.name, s) for c in spec.cells for s in (0, 1)}
    expected = {"d32": 0.002, "d64": 0.001, "d128": 0.0005}  # SP: lr × (d_model / 32)^-1
    for (cell, _), run in final.items():
        lr = expected[cell.rpartition("size=")[2]]
        assert float(dict(run.columns)[LR]) == lr and f"--{LR}={lr}" in run.args and run.evaluate
        assert dict(run.columns)["unbracketed"] == ""  # the search's own bracketing, carried with the value


def test_the_largest_size_verifies_the_transferred_value(tmp_path):
    spec = transfer_spec(tmp_path / "s.yaml", {"rule": SP_RULE})
    ledger = Ledger(tmp_path / "results.csv", spec.ledger_axes)
    runs = search_and_choose(spec, ledger, tmp_path, chosen=0.002)
    verify = by_phase(runs, "verify")
    assert {r.cell.split("~")[0] for r in verify} == {"pos_encoding=rope,size=d128", "pos_encoding=alibi,size=d128"}
    rope = sorted((float(dict(r.columns)[LR]), r.seed) for r in verify if r.cell.startswith("pos_encoding=rope"))
    # ×½ and ×2 of 0.0005 at both tune seeds; ×1 only at seed 2: seed 0's ×1 is the final run (trained once)
    assert rope == [(0.00025, 0), (0.00025, 2), (0.0005, 2), (0.001, 0), (0.001, 2)]
    run = next(r for r in verify if r.cell == "pos_encoding=rope,size=d128~lr=0.001" and r.seed == 2)
    assert f"--{LR}=0.001" in run.args and "--model.arch.d_model=128" in run.args and not run.evaluate
    assert run.dir == tmp_path / "out" / "pos_encoding=rope,size=d128~lr=0.001" / "seed2"
    for run in runs:  # recorded verify runs change nothing the ledger asks for: a killed sweep resumes the same
        if dict(run.columns)["phase"] != "search":
            ledger.put({"cell": run.cell, "seed": str(run.seed), "status": "done", "val/loss": "1.0"})
    assert [(r.cell, r.seed, r.columns) for r in runs_for(spec, ledger, tmp_path)] == [
        (r.cell, r.seed, r.columns) for r in runs
    ]


def test_without_a_rule_the_choice_transfers_unchanged_and_search_on_still_shares(tmp_path):
    grid = GRID | {"model.arch.norm": ["layernorm", "rmsnorm"]}
    block = {"grid": {LR: [0.001, 0.002, 0.004]}, "extend": 1, "search_on": {"model.arch.norm": "layernorm"},
             "transfer": {"from": "d64", "verify": [0.25, 1, 4]}}  # fmt: skip
    spec = load_spec(ladder_spec(tmp_path / "s.yaml", grid, ladder=LADDER, seeds=[0], tune=block))
    ledger = Ledger(tmp_path / "results.csv", spec.ledger_axes)
    searched = {r.cell.split("~")[0] for r in runs_for(spec, ledger, tmp_path)}
    assert searched == {"pos_encoding=rope,norm=layernorm,size=d64", "pos_encoding=alibi,norm=layernorm,size=d64"}
    runs = search_and_choose(spec, ledger, tmp_path, chosen=0.004 / 2)
    assert {float(dict(r.columns)[LR]) for r in by_phase(runs, "final")} == {0.002}
    assert len(by_phase(runs, "final")) == len(spec.cells)
    verify = {(r.cell.split("~")[0], float(dict(r.columns)[LR])) for r in by_phase(runs, "verify")}
    assert verify == {(c.name, lr) for c in spec.cells if c.name.endswith("size=d128") for lr in (0.0005, 0.008)}
