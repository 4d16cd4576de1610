"""The budget axis of a `horizons:` sweep's report (`experiments.analysis.horizons_report`) on constructed ledgers, no
training: each cell's final metric at each horizon with its tokens and FLOPs, the ranking at each horizon with paired
differences, the pairs whose order changes between horizons (and where), and the run-steps branching saved."""

from __future__ import annotations

import json

import pytest
import yaml

from experiments.analysis.comparison import analyse
from experiments.analysis.horizons_report import BranchingCost, HorizonResult, crossings, horizon_table
from experiments.analysis.sweep_report import build_report, horizons_results
from experiments.records.events import RunScalars, joined
from experiments.records.ledger import Ledger
from experiments.sweep.spec import load_spec
from tests.conftest import BASE, FIXED

HORIZONS = (16, 40, 80)
STARTS = {16: 13, 40: 32, 80: 64}
SEEDS = (0, 1, 2)
BATCH, SEQ_LEN, FLOPS_PER_TOKEN = 8, 16, 1000.0
# cell -> horizon -> val/loss per seed: rope leads at 16 and 40, learned overtakes it by 80 (beyond the noise);
# alibi and learned swap at 40 in their means only
LOSSES = {
    "rope": {16: [3.00, 3.01, 3.02], 40: [2.50, 2.52, 2.51], 80: [2.30, 2.31, 2.32]},
    "learned": {16: [3.10, 3.12, 3.11], 40: [2.60, 2.59, 2.61], 80: [2.20, 2.20, 2.21]},
    "alibi": {16: [3.20, 3.21, 3.22], 40: [2.55, 2.70, 2.50], 80: [2.40, 2.41, 2.42]},
}


def horizons_folder(out):
    """A horizons sweep folder (`sweep.json`, ledger) as the engine leaves it, with the rows written by hand."""
    out.mkdir(parents=True, exist_ok=True)
    fixed = {k: v for k, v in FIXED.items() if k != "trainer.max_steps"} | {"model.optim.schedule": "wsd"}
    spec_path = out / "s.yaml"
    grid = {"model.arch.pos_encoding": list(LOSSES)}
    entries = {"base": BASE, "fixed": fixed, "grid": grid, "seeds": list(SEEDS), "horizons": list(HORIZONS)}
    spec_path.write_text(yaml.safe_dump(entries))
    spec = load_spec(spec_path)
    info = spec.snapshot()
    resolved = {"data": {"init_args": {"batch_size": BATCH, "seq_len": SEQ_LEN}}, "trainer": {"devices": 1}}
    info["cells"] = [c | {"resolved": resolved} for c in info["cells"]]
    info["horizons"]["starts"] = {f"pos_encoding={p},horizon={h}": STARTS[h] for p in LOSSES for h in HORIZONS}
    (out / "sweep.json").write_text(json.dumps(info))
    ledger = Ledger(out / "results.csv", spec.ledger_axes)
    for scheme, by_horizon in LOSSES.items():
        stable = f"pos_encoding={scheme},horizon=80~stable"
        for seed in SEEDS:
            ledger.put({"cell": stable, "seed": str(seed), "status": "done", "phase": "stable", "steps": "64",
                        "val/loss": "9.9", "flops_per_token": repr(FLOPS_PER_TOKEN)})  # fmt: skip
            for horizon, values in by_horizon.items():
                ledger.put({"cell": f"pos_encoding={scheme},horizon={horizon}", "seed": str(seed), "status": "done",
                            "model.arch.pos_encoding": scheme, "trainer.max_steps": str(horizon), "phase": "branch",
                            "horizon": str(horizon), "parent": f"{stable}/seed{seed}", "steps": str(horizon),
                            "flops_per_token": repr(FLOPS_PER_TOKEN), "val/loss": repr(values[seed])})  # fmt: skip
    return out, info, ledger


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return horizons_folder(tmp_path_factory.mktemp("horizons") / "out")


def test_each_cell_at_each_horizon_with_its_tokens_and_flops(folder):
    out, info, ledger = folder
    analysis = analyse(ledger, info)
    assert not [c.name for c in analysis.cells if "~stable" in c.name]  # the stable runs are not compared
    table = horizons_results(out)
    assert table.horizons == HORIZONS and table.unit == "tokens" and table.baseline == "pos_encoding=rope"
    at = table.rows["pos_encoding=learned"][40]
    assert at.values == dict(zip(SEEDS, LOSSES["learned"][40])) and at.mean == pytest.approx(2.60)
    assert at.budget == 40 * BATCH * SEQ_LEN and at.flops == 3 * FLOPS_PER_TOKEN * 40 * BATCH * SEQ_LEN
    assert horizon_table(analysis, info, ledger, "val/loss") == table


def test_the_ranking_at_each_horizon_with_paired_differences(folder):
    table = horizons_results(folder[0])
    assert [r.ranking for r in table.rankings] == [
        ("pos_encoding=rope", "pos_encoding=learned", "pos_encoding=alibi"),
        ("pos_encoding=rope", "pos_encoding=alibi", "pos_encoding=learned"),
        ("pos_encoding=learned", "pos_encoding=rope", "pos_encoding=alibi"),
    ]
    late = table.rankings[-1].differences["pos_encoding=learned"]  # learned − rope at 80
    assert late.n == 3 and late.diff == pytest.approx(-0.1067, abs=1e-3) and late.ci_high < 0


def test_crossings_name_the_pair_and_the_horizon_interval(folder):
    table = horizons_results(folder[0])
    found = {(c.cells, c.low, c.high): c for c in table.crossings}
    assert (
        set(found)
        == {
            (("pos_encoding=rope", "pos_encoding=learned"), 40, 80),
            (("pos_encoding=learned", "pos_encoding=alibi"), 16, 40),
            (("pos_encoding=learned", "pos_encoding=alibi"), 40, 80),
        }
        and table.pairs == 3
    )
    assert found[(("pos_encoding=rope", "pos_encoding=learned"), 40, 80)].beyond_noise
    assert not found[(("pos_encoding=learned", "pos_encoding=alibi"), 16, 40)].beyond_noise  # alibi's noise at 40


def test_a_horizon_without_runs_in_common_is_skipped_and_a_tie_is_no_order():
    at = lambda value: HorizonResult({0: value}, 1, 1)  # noqa: E731
    rows = {"a": {16: at(1.0), 40: at(2.0), 80: at(3.0)}, "b": {16: at(2.0), 40: at(2.0), 80: at(1.0)}}
    found, pairs = crossings(rows, HORIZONS)
    assert [(c.low, c.high) for c in found] == [(16, 80)] and pairs == 1
    del rows["b"][80]
    assert crossings(rows, HORIZONS) == ([], 0)


def test_the_cost_saved_by_branching(folder):
    table = horizons_results(folder[0])
    assert list(table.costs.values()) == [BranchingCost(64, {16: 3, 40: 8, 80: 16})] * 3
    cost = table.costs["pos_encoding=rope"]
    assert (cost.branched, cost.separate, round(cost.saved, 3)) == (91, 136, 0.331)
    assert table.trained == 3 * 3 * 91  # every stable run and branch of the ledger, each branch past its start


def test_the_report_states_the_budget_axis(folder):
    out = folder[0]
    build_report(out)
    report = (out / "report.md").read_text()
    section = report[report.index("## Horizons") :]
    assert "| `pos_encoding=learned` | 3.110 ± 0.010 (3) · 2.05k tokens, 6.14e+06 FLOPs |" in section
    assert (
        "| 80 | `pos_encoding=learned` > `pos_encoding=rope` > `pos_encoding=alibi` | `pos_encoding=learned` -0.107 ["
        in section
    )
    assert ("- `pos_encoding=rope` and `pos_encoding=learned` cross between 40 and 80 steps (5.12k–10.2k tokens): "
            "`pos_encoding=rope` − `pos_encoding=learned` = -0.090 [") in section  # fmt: skip
    assert "the order reverses beyond the noise (both 95% CIs exclude 0)." in section
    assert "in the means only (a 95% CI holds 0)." in section
    assert ("per cell and seed, the stable run (64 steps) and the decay branches (3 + 8 + 16) train 91 run-steps for "
            "all 3 horizons, against 136 for separate runs from scratch (16 + 40 + 80). The sweep's 3 cell(s) × 3 "
            "seed(s): 819 run-steps instead of 1,224, 33% saved (separate runs would train 1.49× as many). Its "
            "finished runs have trained 819 run-steps.") in section  # fmt: skip
    assert (out / "plots" / "horizons_budget.png").exists() and (out / "plots" / "horizons_flops.png").exists()


def test_a_branch_curve_begins_with_its_stable_runs():
    stable = RunScalars({"val/loss": {3: 4.0, 7: 3.5, 11: 3.2}, "lr": {0: 1.0}}, 5.0)
    branch = RunScalars({"val/loss": {11: 3.1, 15: 3.0}}, 1.0)
    both = joined(stable, branch, 10)
    assert both.curves == {"val/loss": {3: 4.0, 7: 3.5, 11: 3.1, 15: 3.0}, "lr": {0: 1.0}} and both.wall_time_s == 1.0
