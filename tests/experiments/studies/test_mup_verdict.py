"""Studies 18-19's verdicts follow their specs' rules, on synthetic ladder ledgers (no training): where each
(parametrization, size) search put its optimum, in x2 grid steps."""

from __future__ import annotations

import json
import math

import pytest

from experiments.records.ledger import Ledger
from experiments.studies.mup import verdict

GRID = [1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2]
WIDTHS = ("w64", "w128", "w256", "w512")


def write_study(out, optima, axis="model.arch.d_model", sizes=WIDTHS, level=None, open_cells=()):
    """optima: cell -> each size's optimum lr. Each size's validation loss is a parabola in log2(lr) around its
    optimum, shifted by `level(cell, size_index)`; two search seeds ±0.001 apart; final runs at the optimum."""
    out.mkdir(parents=True, exist_ok=True)
    level = level or (lambda cell, i: 2.0 - 0.1 * i)
    names = {f"{cell},size={size}": [cell, size] for cell in optima for size in sizes}
    info = {"cells": [{"name": n, "overrides": {}} for n in names], "axes": [],
            "ladder": {"sizes": [{"name": s, "overrides": {axis: 2 ** (i + 6)}} for i, s in enumerate(sizes)],
                       "cells": names},
            "tune": {"grid": {"model.optim.lr": GRID}, "extend": 4, "metric": "val/loss",
                     "seeds": [10, 11]}}  # fmt: skip
    (out / "sweep.json").write_text(json.dumps(info))
    ledger = Ledger(out / "results.csv", ("phase", "model.optim.lr", "unbracketed"))
    for name, (cell, size) in names.items():
        i = sizes.index(size)
        best = optima[cell][i]
        for lr in GRID:
            loss = level(cell, i) + 0.05 * math.log2(lr / best) ** 2
            for seed, noise in ((10, -0.001), (11, 0.001)):
                ledger.put({"cell": f"{name}~lr={lr}", "seed": str(seed), "status": "done", "phase": "search",
                            "model.optim.lr": repr(lr), "val/loss": repr(loss + noise)})  # fmt: skip
        for seed in (0, 1):
            ledger.put({"cell": name, "seed": str(seed), "status": "done", "phase": "final",
                        "model.optim.lr": repr(best), "unbracketed": "model.optim.lr" if name in open_cells else "",
                        "test/loss": repr(level(cell, i) + 0.01 * seed)})  # fmt: skip
    return out


def claim(lines, wording):
    return next(line for line in lines if line.startswith(f"- **{wording}: "))


def test_tp5s_figure_one_reproduces(tmp_path):
    lines = verdict.verdicts(write_study(tmp_path, {"sp": [1.6e-2, 8e-3, 4e-3, 2e-3], "mup": [8e-3, 8e-3, 8e-3, 8e-3]}))
    assert "SP's optimum falls with width: reproduced." in claim(lines, "SP's optimum falls with width")
    assert "holds across widths: reproduced." in claim(lines, "µP's optimum holds across widths")
    assert "every learning rate: reproduced." in claim(lines, "Under µP, wider is better at every learning rate")
    assert sum(line.startswith("| sp |") or line.startswith("| mup |") for line in lines) == 8


def test_one_step_of_drift_is_still_transfer(tmp_path):
    lines = verdict.verdicts(write_study(tmp_path, {"sp": [8e-3] * 4, "mup": [8e-3, 1.6e-2, 8e-3, 4e-3]}))
    assert "holds across widths: reproduced." in claim(lines, "µP's optimum holds across widths")


def test_a_mup_optimum_two_steps_away_is_not_transfer_and_a_flat_sp_is_not_a_fall(tmp_path):
    lines = verdict.verdicts(write_study(tmp_path, {"sp": [8e-3, 8e-3, 4e-3, 8e-3], "mup": [8e-3, 8e-3, 8e-3, 2e-3]}))
    assert ": not reproduced." in claim(lines, "SP's optimum falls with width")
    assert ": not reproduced." in claim(lines, "µP's optimum holds across widths")


def test_a_wider_model_worse_beyond_noise_fails_wider_is_better(tmp_path):
    worse_at_top = write_study(tmp_path, {"sp": [8e-3] * 4, "mup": [8e-3] * 4},
                               level=lambda cell, i: 2.0 - 0.1 * i + (0.3 if i == 3 else 0))  # fmt: skip
    assert ": not reproduced." in claim(
        verdict.verdicts(worse_at_top), "Under µP, wider is better at every learning rate"
    )


def test_a_narrower_model_that_diverged_where_the_wider_trains_is_a_fall(tmp_path):
    """At the top rate the narrowest µP model diverges and the next trains: wider is better there too."""
    out = write_study(tmp_path, {"sp": [8e-3] * 4, "mup": [8e-3] * 4})
    ledger = Ledger(out / "results.csv")
    for seed in (10, 11):
        row = ledger.get(f"mup,size=w64~lr={GRID[-1]}", seed)
        ledger.put(row | {"status": "diverged", "val/loss": ""})
    assert "every learning rate: reproduced." in claim(
        verdict.verdicts(out), "Under µP, wider is better at every learning rate"
    )


def test_an_unbracketed_cell_makes_its_claims_inconclusive(tmp_path):
    sweep = write_study(tmp_path, {"sp": [1.6e-2, 8e-3, 4e-3, 2e-3], "mup": [8e-3] * 4}, open_cells=("sp,size=w512",))
    lines = verdict.verdicts(sweep)
    guarded = ": inconclusive by the bracketing rule.** (unbracketed: sp,size=w512"
    assert guarded in claim(lines, "SP's optimum falls with width")
    assert ": reproduced." in claim(lines, "µP's optimum holds across widths")


def test_the_depth_study_reads_its_own_claims(tmp_path):
    sweep = write_study(tmp_path, {"mup": [1.6e-2, 8e-3, 4e-3, 4e-3], "completep": [8e-3] * 4},
                        axis="model.arch.n_layers", sizes=("L2", "L4", "L8", "L16"))  # fmt: skip
    lines = verdict.verdicts(sweep)
    assert ": reproduced." in claim(lines, "CompleteP's optimum holds with depth")
    assert ": reproduced." in claim(lines, "µP's optimum moves with depth")


def test_the_script_writes_the_verdict_and_the_curves(tmp_path, capsys):
    sweep = write_study(tmp_path, {"sp": [1.6e-2, 8e-3, 4e-3, 2e-3], "mup": [8e-3] * 4})
    assert verdict.main([str(sweep)]) == 0
    assert (sweep / "verdict.md").read_text().startswith("- **SP's optimum falls with width: reproduced.")
    assert (sweep / "lr_curves.png").stat().st_size > 0


@pytest.mark.parametrize("lr, reference, expected", [(4e-3, 8e-3, -1.0), (3.2e-2, 8e-3, 2.0)])
def test_steps(lr, reference, expected):
    assert verdict.steps(lr, reference) == pytest.approx(expected)


def test_a_post_hoc_rerun_of_one_parametrization_replaces_its_cells(tmp_path):
    """mup_width_anchored re-runs µP alone: its searches and final runs stand in for the first sweep's µP, whose
    verdict stays where it was; SP is read from the first sweep."""
    first = write_study(tmp_path / "first", {"sp": [1.6e-2, 8e-3, 4e-3, 2e-3], "mup": [8e-3, 2e-3, 8e-3, 4e-3]})
    lines = verdict.verdicts(first)
    assert "holds across widths: not reproduced." in claim(lines, "µP's optimum holds across widths")
    rerun = write_study(tmp_path / "rerun", {"mup": [8e-3, 8e-3, 8e-3, 8e-3]}, level=lambda cell, i: 1.0 - 0.1 * i)
    (first / "verdict.md").write_text("pre-registered\n")
    assert verdict.main([str(first), str(rerun)]) == 0
    assert (first / "verdict.md").read_text() == "pre-registered\n"
    text = (rerun / "verdict.md").read_text()
    assert text.startswith("Post hoc: rerun's parametrizations replace first's.")
    lines = text.splitlines()
    assert "holds across widths: reproduced." in claim(lines, "µP's optimum holds across widths")
    assert "falls with width: reproduced." in claim(lines, "SP's optimum falls with width")
    assert "| mup | w64 | 0.008 | 1.000 ± 0.001 | 1.005 ± 0.007 | yes |" in lines  # the re-run's runs
    assert (rerun / "lr_curves.png").exists()
