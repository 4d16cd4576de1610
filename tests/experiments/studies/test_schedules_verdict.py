"""Study 21's verdicts follow `wsd_horizons.yaml`'s rules, on synthetic ledgers of its two sweeps (no training):
WSD 1-sqrt against cosine within ±0.02, 1-sqrt against linear, a constant run's average between its trained
weights and the cooldown; an unbracketed cell or a cell at the unigram loss makes its comparison inconclusive."""

from __future__ import annotations

import json

from experiments.records.ledger import Ledger
from experiments.studies.schedules import verdict

HORIZONS = (500, 1000, 2000)
NOISE = {0: 0.0, 1: 0.006, 2: -0.004}  # per seed, shared by every cell (the pairing removes it) ...
JITTER = {0: 0.001, 1: -0.002, 2: 0.001}  # ... and a little of each schedule's own, in its own amount
AMOUNT = {"cosine": 1, "wsd-1sqrt": 2, "wsd-linear": 3, "constant-avg": 4}


def write_sweep(out, cells: dict[tuple[str, int], tuple[float, str]], horizons: bool, averaged=None) -> None:
    """cells: (schedule, horizon) -> (test loss, unbracketed keys); `averaged`: the same for test_avg/loss. Run
    times: a stable run 50 s, a decay branch to h steps h/100 s; a separate run h/20 s."""
    out.mkdir(parents=True, exist_ok=True)
    if horizons:
        names = {(s, h): f"{s},horizon={h}" for s, h in cells}
        info = {"cells": [{"name": n, "overrides": {}} for n in names.values()],
                "horizons": {"steps": list(HORIZONS), "cells": {n: [s, h] for (s, h), n in names.items()}}}  # fmt: skip
    else:
        names = {(s, h): f"schedule={s},max_steps={h}" for s, h in cells}
        info = {"cells": [{"name": n, "overrides": {"model.optim.schedule": s, "trainer.max_steps": h}}
                          for (s, h), n in names.items()]}  # fmt: skip
    info["tune"] = {"grid": {"model.optim.lr": [1e-3, 2e-3, 4e-3]}, "extend": 4, "metric": "val/loss", "seeds": [10]}
    (out / "sweep.json").write_text(json.dumps(info))
    ledger = Ledger(out / "results.csv", ("phase", "model.optim.lr", "unbracketed"))
    for key, (loss, open_keys) in cells.items():
        for lr in (1e-3, 2e-3, 4e-3):
            ledger.put({"cell": f"{names[key]}~lr={lr}", "seed": "10", "status": "done", "phase": "search",
                        "model.optim.lr": repr(lr), "val/loss": repr(loss + abs(lr - 2e-3))})  # fmt: skip
        for seed in NOISE:
            own = JITTER[seed] * AMOUNT[key[0]]
            row = {"cell": names[key], "seed": str(seed), "status": "done", "phase": "final", "model.optim.lr": "0.002",
                   "unbracketed": open_keys, "test/loss": repr(loss + NOISE[seed] + own),
                   "wall_time_s": repr(key[1] / (100 if horizons else 20))}  # fmt: skip
            if horizons:
                stable = f"{key[0]},horizon={max(HORIZONS)}~lr=0.002~stable"
                ledger.put({"cell": stable, "seed": str(seed), "status": "done", "phase": "stable",
                            "model.optim.lr": "0.002", "wall_time_s": "50"})  # fmt: skip
                row["parent"] = f"{stable}/seed{seed}"
            if averaged and key in averaged:
                row["test_avg/loss"] = repr(averaged[key] + NOISE[seed] - own)
            ledger.put(row)


def study(tmp_path, cosine=2.0, one_sqrt=2.002, linear=2.05, raw=2.15, avg=2.06, open_cell=None):
    """Each schedule's test loss by horizon (a number for all three, or a dict)."""
    at = lambda v, h: v[h] if isinstance(v, dict) else v  # noqa: E731
    unbracketed = lambda s, h: "model.optim.lr" if open_cell == (s, h) else ""  # noqa: E731
    wsd = {(s, h): (at(v, h), unbracketed(s, h)) for s, v in (("wsd-1sqrt", one_sqrt), ("wsd-linear", linear),
                                                            ("constant-avg", raw)) for h in HORIZONS}  # fmt: skip
    write_sweep(tmp_path / "wsd", wsd, True, {("constant-avg", h): at(avg, h) for h in HORIZONS})
    write_sweep(tmp_path / "cos", {("cosine", h): (at(cosine, h), unbracketed("cosine", h)) for h in HORIZONS}, False)
    return verdict.verdicts(tmp_path / "wsd", tmp_path / "cos")


def claim(lines, wording):
    return next(line for line in lines if line.startswith(f"- **{wording}"))


def test_hageles_three_findings_reproduce(tmp_path):
    lines = study(tmp_path)
    assert claim(lines, "WSD with a 20% 1-sqrt cooldown matches cosine").startswith(
        "- **WSD with a 20% 1-sqrt cooldown matches cosine: reproduced.** 500: 1-sqrt − cosine +0.00"
    )
    assert "beats a linear cooldown: reproduced." in claim(lines, "1-sqrt beats a linear cooldown")
    assert "closes part of the gap to one: reproduced." in claim(lines, "Averaging without a cooldown")
    rows = [line for line in lines if line.startswith("| ")]
    assert [row.split(" | ")[0] for row in rows[1:]] == [
        "| schedule",
        "| cosine",
        "| wsd-1sqrt",
        "| wsd-linear",
        "| constant-avg",
        "| constant-avg, averaged",
    ][1:]
    assert rows[1].startswith("| cosine | 0.002, 2.001 ± 0.00")  # the chosen rate, then test/loss over seeds
    # per seed: one 50 s stable run and branches of 5 + 10 + 20 s, against separate runs of 25 + 50 + 100 s
    cost = next(line for line in lines if line.startswith("- Cost, measured"))
    assert "decay branches took 85 s for all 3 horizons; cosine's separate runs 175 s (51% less time" in cost


def test_a_gap_beyond_the_margin_at_one_horizon_is_not_a_match(tmp_path):
    lines = study(tmp_path, one_sqrt={500: 2.0, 1000: 2.0, 2000: 2.1}, linear=2.2, raw=2.3, avg=2.2)
    assert "matches cosine: not reproduced." in claim(lines, "WSD with a 20% 1-sqrt cooldown matches cosine")


def test_level_cooldowns_and_an_average_that_beats_the_cooldown_refute(tmp_path):
    lines = study(tmp_path, linear=2.002, avg=1.9)
    assert "beats a linear cooldown: not reproduced." in claim(lines, "1-sqrt beats a linear cooldown")
    assert "closes part of the gap to one: not reproduced." in claim(lines, "Averaging without a cooldown")


def test_an_unbracketed_cell_or_one_at_the_unigram_loss_is_inconclusive_by_rule(tmp_path):
    lines = study(tmp_path, open_cell=("cosine", 2000))
    assert "matches cosine: inconclusive by the bracketing rule." in claim(lines, "WSD with a 20% 1-sqrt cooldown")
    lines = study(tmp_path, linear={500: 3.4, 1000: 2.05, 2000: 2.05})
    assert "a linear cooldown: inconclusive by the floor rule." in claim(lines, "1-sqrt beats a linear cooldown")


def test_no_verdict_before_the_final_runs(tmp_path):
    write_sweep(tmp_path / "wsd", {("wsd-1sqrt", 500): (2.0, "")}, True)
    write_sweep(tmp_path / "cos", {("cosine", 500): (2.0, "")}, False)
    info = json.loads((tmp_path / "wsd" / "sweep.json").read_text())
    info["horizons"]["cells"]["wsd-linear,horizon=500"] = ["wsd-linear", 500]
    (tmp_path / "wsd" / "sweep.json").write_text(json.dumps(info))
    assert verdict.verdicts(tmp_path / "wsd", tmp_path / "cos")[0].startswith(
        "- no final runs yet for wsd-linear at 500"
    )


def test_the_measured_cost_waits_for_a_seed_both_sweeps_finished(tmp_path):
    """Every (schedule, horizon) has a final run, but no seed has both the branched runs and cosine's: no cost yet
    (not a division by zero)."""
    study(tmp_path)
    wsd, cos = Ledger(tmp_path / "wsd" / "results.csv"), Ledger(tmp_path / "cos" / "results.csv")
    for h in HORIZONS:
        cos.remove(f"schedule=cosine,max_steps={h}", 0)
        for seed in (1, 2):
            wsd.remove(f"wsd-1sqrt,horizon={h}", seed)
    lines = verdict.verdicts(tmp_path / "wsd", tmp_path / "cos")
    assert "- Cost, measured: no seed has both wsd-1sqrt's branched runs and cosine's separate runs yet." in lines
