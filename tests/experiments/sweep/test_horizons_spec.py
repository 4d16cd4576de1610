"""`horizons:` in a sweep spec (`experiments.sweep.horizons`): the block and its errors, the schedule checks of each
cell, and the runs it asks for without training (`branches.horizon_runs` is a function of the ledger): a stable run
per cell and seed saved at every horizon's decay start, then a branch per horizon from that checkpoint; a branch
whose stable run failed, or diverged before the branch's start, is recorded as such instead of run."""

from __future__ import annotations

import json

import pytest
import yaml

from experiments.records.ledger import Ledger
from experiments.sweep.branches import horizon_runs
from experiments.sweep.same_sweep import sweep_info
from experiments.sweep.spec import SpecError, load_spec
from experiments.sweep.validate import CheckedCell, check_spec
from tests.conftest import BASE, FIXED

SETTINGS = {k: v for k, v in FIXED.items() if k != "trainer.max_steps"} | {"model.optim.schedule": "wsd",
                                                                         "model.optim.warmup_steps": 2}  # fmt: skip
GRID = {"model.arch.pos_encoding": ["learned", "rope"]}
STARTS = {16: 13, 40: 32, 80: 64}  # the default 20% decay: 16 - round(3.2), 40 - 8, 80 - 16
STABLE = "pos_encoding=rope,horizon=80~stable"


def write(path, **entries):
    spec = {"base": BASE, "fixed": SETTINGS, "grid": GRID, "seeds": [0, 1], "horizons": [40, 16, 80]} | entries
    path.write_text(yaml.safe_dump({k: v for k, v in spec.items() if v is not None}, sort_keys=False))
    return path


def checked_cells(spec):
    """The cells as `check_spec` gives them, without the parse (each horizon's default-settings decay start)."""
    return {c.name: CheckedCell(c, (), dict(c.overrides), branch_start=STARTS[c.overrides["trainer.max_steps"]])
            for c in spec.cells}  # fmt: skip


def plan(spec, ledger, tmp_path):
    return horizon_runs(spec, checked_cells(spec), tmp_path / "out", {c.name: 1 for c in spec.cells}, ledger)


def done(ledger, cell, seed, status="done", **values):
    ledger.put({"cell": cell, "seed": str(seed), "status": status, **values})


def test_every_cell_at_every_horizon_compared_within_its_horizon(tmp_path):
    spec = load_spec(write(tmp_path / "s.yaml", baseline="pos_encoding=rope"))
    assert spec.horizons.steps == (16, 40, 80) and spec.axes == ("model.arch.pos_encoding", "trainer.max_steps")
    assert [c.name for c in spec.cells][:2] == ["pos_encoding=learned,horizon=16", "pos_encoding=rope,horizon=16"]
    assert spec.cell_by_name["pos_encoding=rope,horizon=40"].overrides["trainer.max_steps"] == 40
    assert spec.baseline == "pos_encoding=rope,horizon=16" and spec.report.compare_within == ("trainer.max_steps",)
    assert spec.ledger_axes[-3:] == ("phase", "horizon", "parent")
    snapshot = spec.snapshot()["horizons"]  # what sweep.json keeps for the report
    assert snapshot["steps"] == [16, 40, 80] and snapshot["stable"] == {
        "pos_encoding=learned,horizon=80~stable": "pos_encoding=learned",
        STABLE: "pos_encoding=rope",
    }
    assert snapshot["cells"]["pos_encoding=rope,horizon=40"] == ["pos_encoding=rope", 40]


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ({"horizons": [100]}, "horizons: needs a list of at least 2 training lengths"),
        ({"horizons": [100, 0]}, "horizons: needs a list of at least 2"),
        ({"horizons": [100, 100]}, "horizons: [100, 100] repeats a length"),
        ({"fixed": SETTINGS | {"trainer.max_steps": 5}}, "horizons: each horizon sets trainer.max_steps; drop it"),
        ({"tune": {"grid": {"model.optim.lr": [0.001, 0.002]}, "search_on": {"model.arch.pos_encoding": "rope"}}},
         "horizons: with tune: searches every cell at every horizon; tune.transfer and tune.search_on are not"),
        ({"tune": {"grid": {"model.optim.decay_fraction": [0.1, 0.2]}}},
         "horizons: tune.grid's ['model.optim.decay_fraction'] would move each point's decay start"),
        ({"ladder": [{"name": "a", "model.arch.n_heads": 2}, {"name": "b", "model.arch.n_heads": 4}]},
         "horizons: not combined with `ladder:` yet"),
    ],
)  # fmt: skip
def test_a_bad_block_names_the_fix_and_its_line(tmp_path, entries, message):
    with pytest.raises(SpecError, match=r"s\.yaml:\d+: " + message.replace("[", r"\[").replace("]", r"\]")):
        load_spec(write(tmp_path / "s.yaml", **entries))


@pytest.mark.parametrize(
    ("fixed", "message"),
    [
        ({"model.optim.schedule": "cosine"}, "model.optim.schedule is 'cosine', whose rate at every step depends on "
                                             "the run's length.*set model.optim.schedule: wsd"),
        ({"model.optim.warmup_steps": 16}, "horizons: 16 steps decay from step 16 .*lengthen the horizon"),
        ({"trainer.val_check_interval": 3}, "horizons: 16 steps is not a multiple of trainer.val_check_interval"),
        ({"averaging.kind": "uniform", "averaging.last_fraction": 0.5},  # the window would open in the stable run
         r"averaging.last_fraction 0.5 averages from before 16 steps' decay start \(13\).*at most model.optim"),
    ],
)  # fmt: skip
def test_each_cell_needs_a_schedule_that_branches(tmp_path, fixed, message):
    spec = load_spec(write(tmp_path / "s.yaml", fixed=SETTINGS | fixed, grid={"model.arch.pos_encoding": ["rope"]}))
    with pytest.raises(SpecError, match=r"cell 'pos_encoding=rope,horizon=16'.*" + message):
        check_spec(spec)


def test_the_parse_gives_each_horizon_its_decay_start(tmp_path):
    fixed = SETTINGS | {"model.optim.schedule": "constant"}  # no decay: a branch is the stable run continued
    spec = load_spec(write(tmp_path / "s.yaml", fixed=fixed, grid={"model.arch.pos_encoding": ["rope"]}))
    checked = check_spec(spec)
    assert {n: c.branch_start for n, c in checked.items()} == {f"pos_encoding=rope,horizon={h}": s
                                                               for h, s in STARTS.items()}  # fmt: skip
    assert sweep_info(spec, checked)["horizons"]["starts"]["pos_encoding=rope,horizon=40"] == 32


def test_stable_runs_first_then_a_branch_per_horizon_from_its_checkpoint(tmp_path):
    spec = load_spec(write(tmp_path / "s.yaml"))
    ledger = Ledger(tmp_path / "out" / "results.csv", spec.ledger_axes)
    first = plan(spec, ledger, tmp_path)
    assert [(r.cell, r.seed) for r in first.runs] == [
        ("pos_encoding=learned,horizon=80~stable", 0), (STABLE, 0), ("pos_encoding=learned,horizon=80~stable", 1),
        (STABLE, 1)]  # fmt: skip
    stable = first.runs[1]
    assert stable.base_cell == "pos_encoding=rope,horizon=80" and "--trainer.max_steps=80" in stable.args
    callback = json.loads(stable.args[-1].removeprefix("--trainer.callbacks+="))
    assert callback == {"class_path": "lit_modules.branch_points.BranchPoints",
                        "init_args": {"dirpath": str(stable.dir / "checkpoints"), "steps": [13, 32, 64]}}  # fmt: skip
    assert dict(stable.columns) == {"phase": "stable", "horizon": "", "parent": ""} and stable.start_from is None

    done(ledger, STABLE, 0)
    runs = plan(spec, ledger, tmp_path).runs
    branches = [r for r in runs if dict(r.columns)["phase"] == "branch"]
    assert [(r.cell, r.seed) for r in branches] == [(f"pos_encoding=rope,horizon={h}", 0) for h in (16, 40, 80)]
    for run, (horizon, start) in zip(branches, STARTS.items()):
        assert run.start_from == stable.dir / "checkpoints" / f"step{start}.ckpt"
        assert run.argv()[-1] == f"--ckpt_path={run.start_from}" and f"--trainer.max_steps={horizon}" in run.args
        assert run.argv(resume=True)[-1] == f"--ckpt_path={run.checkpoint}"  # after a kill: from its own checkpoint
        assert dict(run.columns) == {"phase": "branch", "horizon": str(horizon), "parent": f"{STABLE}/seed0"}
    assert run.to_json() and type(run).from_json(run.to_json()) == run  # what a SLURM job gets


def test_a_failed_stable_run_blocks_its_branches_until_it_is_done(tmp_path):
    spec = load_spec(write(tmp_path / "s.yaml"))
    ledger = Ledger(tmp_path / "out" / "results.csv", spec.ledger_axes)
    done(ledger, STABLE, 0, "failed", error="ValueError: bad data")
    found = plan(spec, ledger, tmp_path)
    assert not [r for r in found.runs if r.cell.startswith("pos_encoding=rope,horizon=") and "~" not in r.cell]
    assert [(row["cell"], row["status"]) for row in found.blocked] == [
        (f"pos_encoding=rope,horizon={h}", "failed") for h in (16, 40, 80)]  # fmt: skip
    assert found.blocked[0]["error"] == f"parent {STABLE}/seed0 failed: ValueError: bad data"
    assert found.blocked[0]["parent"] == f"{STABLE}/seed0" and found.blocked[0]["horizon"] == "16"
    found.apply(ledger)
    assert ledger.get("pos_encoding=rope,horizon=16", 0)["status"] == "failed"
    assert plan(spec, ledger, tmp_path).blocked == found.blocked  # the same rows: nothing rewritten
    done(ledger, STABLE, 0)  # run again (--retry-failed) and done: the branches run, their stale rows go
    again = plan(spec, ledger, tmp_path)
    assert not again.blocked and len(again.cleared) == 3
    again.apply(ledger)
    assert ledger.get("pos_encoding=rope,horizon=16", 0) is None


def test_a_diverged_stable_run_gives_the_branches_that_start_before_it(tmp_path):
    spec = load_spec(write(tmp_path / "s.yaml"))
    ledger = Ledger(tmp_path / "out" / "results.csv", spec.ledger_axes)
    done(ledger, STABLE, 0, "diverged", diverged_at_step="32")
    found = plan(spec, ledger, tmp_path)
    assert [r.cell for r in found.runs if r.start_from] == ["pos_encoding=rope,horizon=16"]  # 13 < 32
    assert [(row["cell"], row["status"], row["diverged_at_step"]) for row in found.blocked] == [
        ("pos_encoding=rope,horizon=40", "diverged", "32"),
        ("pos_encoding=rope,horizon=80", "diverged", "32"),
    ]
    assert found.blocked[0]["error"] == (f"parent {STABLE}/seed0 diverged at step 32, before this horizon's decay "
                                         "start (32)")  # fmt: skip
