"""The ladder section of a report (`experiments.analysis.ladder_report`) on a synthetic ladder ledger: planted
laws for two cells whose curves cross inside the ladder, no training."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.analysis import ladder_fit
from experiments.analysis.comparison import analyse
from experiments.analysis.ladder_fit import law
from experiments.analysis.ladder_report import ladder_section
from experiments.analysis.sweep_report import ladder_results
from experiments.records.ledger import Ledger

SIZES = {"d32": 1e4, "d64": 3e4, "d96": 1e5, "d128": 3e5, "d192": 1e6}
LAWS = {"relu": (1.6, 5.0, 0.3), "swiglu": (1.4, 11.3, 0.3)}  # swiglu worse when small, better when large


def write_ladder(out):
    cells = {f"act={a},size={s}": [f"act={a}", s] for s in SIZES for a in LAWS}
    info = {
        "cells": [{"name": n, "overrides": {}, "resolved": {"data": {"init_args": {"batch_size": 8, "seq_len": 16}}}}
                  for n in cells],
        "baseline": "act=relu,size=d32", "axes": [],
        "ladder": {"sizes": [{"name": s, "overrides": {}} for s in SIZES], "cells": cells},
    }  # fmt: skip
    (out / "sweep.json").write_text(json.dumps(info))
    ledger = Ledger(out / "results.csv")
    noise = np.random.default_rng(0)
    for name, (base, size) in cells.items():
        n = SIZES[size]
        for seed in range(3):
            loss = float(law(np.array(n), *LAWS[base.split("=")[1]]) + noise.normal(0, 0.003))
            ledger.put({"cell": name, "seed": str(seed), "status": "done", "val/loss": repr(loss), "steps": "100",
                        "params_non_embedding": repr(n), "flops_per_token": repr(2 * n)})  # fmt: skip
    return info, ledger


def test_the_section_fits_ranks_and_finds_the_planted_crossing(tmp_path, monkeypatch):
    monkeypatch.setattr(ladder_fit, "BOOTSTRAP", 200)  # enough for the assertions, a fifth of the time
    info, ledger = write_ladder(tmp_path)
    text, figures = ladder_section(tmp_path, analyse(ledger, info), info)
    lines = text.splitlines()
    relu = next(line for line in lines if line.startswith("| `act=relu` |"))
    assert "1.6" in relu.split(" | ")[6]  # E ≈ 1.6 in the fit column
    ranking = {line.split(" | ")[0]: line for line in lines if line.startswith("| d")}
    assert "`act=relu` > `act=swiglu`" in ranking["| d32"] and "`act=swiglu` > `act=relu`" in ranking["| d192"]
    crossing = next(line for line in lines if line.startswith("- `act=swiglu` and `act=relu`"))
    assert "cross at N ≈" in crossing  # planted near 1e5
    n = float(crossing.split("≈ ")[1].split(" ")[0].replace(",", ""))
    assert 3e4 < n < 3e5
    assert {p.name for _, p in figures} == {"ladder_params.png", "ladder_flops.png"}
    assert (tmp_path / "plots" / "ladder_flops.png").exists()


def test_ladder_metrics_repeat_the_section_for_another_metric(tmp_path, monkeypatch):
    monkeypatch.setattr(ladder_fit, "BOOTSTRAP", 50)
    info, ledger = write_ladder(tmp_path)
    for (cell, seed), row in list(ledger.rows.items()):  # a second metric where swiglu leads at every size
        shift = -0.5 if "swiglu" in cell else 0.0
        ledger.put(row | {"val/loss@64": repr(float(row["val/loss"]) + 1.0 + shift)})
    info |= {"ladder_metrics": ["val/loss@64", "val/loss@128"]}
    text, figures = ladder_section(tmp_path, analyse(ledger, info), info)
    main, extra, missing = text.split("### ")[1:]
    assert main.startswith("`val/loss`") and extra.startswith("`val/loss@64`")
    assert missing.startswith("`val/loss@128`") and "Not logged by any run yet" in missing
    ranking = {line.split(" | ")[0]: line for line in extra.splitlines() if line.startswith("| d")}
    assert all("`act=swiglu` > `act=relu`" in ranking[f"| {size}"] for size in SIZES)
    assert {p.name for _, p in figures} == {
        "ladder_params.png",
        "ladder_flops.png",
        "ladder_params_val_loss_64.png",
        "ladder_flops_val_loss_64.png",
    }


def test_the_ladder_results_are_data_a_caller_reads_without_the_markdown(tmp_path, monkeypatch):
    monkeypatch.setattr(ladder_fit, "BOOTSTRAP", 50)
    write_ladder(tmp_path)
    (table,) = ladder_results(tmp_path)  # from the folder, as the GPU check reads its ladder
    assert table.metric == "val/loss" and table.sizes == tuple(SIZES) and table.baseline == "act=relu"
    relu, swiglu = table.row("act=relu"), table.row("act=swiglu")
    assert relu.fit is not None and relu.fit.point.e == pytest.approx(1.6, abs=0.05)
    assert len(swiglu.sizes["d192"].values) == 3 and swiglu.sizes["d192"].params == SIZES["d192"]
    rankings = {r.size: r for r in table.rankings}
    assert rankings["d32"].ranking == ("act=relu", "act=swiglu") and rankings["d192"].ranking[0] == "act=swiglu"
    assert rankings["d192"].differences["act=swiglu"].diff < 0  # better than the baseline at the largest size
    assert 3e4 < table.crossings["act=swiglu"].n < 3e5
    assert ladder_results(tmp_path.parent) == []  # no sweep.json with a ladder


def test_decision_accuracy_is_the_share_of_pairs_ranked_as_at_the_top():
    from experiments.analysis.ladder_report import LadderRow, SizeResult, decision_accuracy

    def row(cell, small, top):  # three seeds, no noise: the bootstrap interval is the point
        at = lambda v: SizeResult({s: v for s in (0, 1, 2)}, 1.0, 1.0)  # noqa: E731
        return LadderRow(cell, {"d64": at(small), "d128": at(top)}, None)

    rows = (row("a", 1.0, 1.0), row("b", 3.0, 2.0), row("c", 2.0, 3.0))  # b and c swap between the sizes
    assert decision_accuracy(rows, ("d64", "d128"), 1.0) == {"d64": (2 / 3, 2 / 3, 2 / 3)}
    assert decision_accuracy(rows, ("d64", "d128"), -1.0)["d64"][0] == 2 / 3  # higher is better: same pairs
    assert decision_accuracy(rows[:1], ("d64", "d128"), 1.0) == {}  # one cell: no pair to rank

    b = {"d64": SizeResult({0: 0.5, 1: 1.5, 2: 1.4}, 1, 1), "d128": SizeResult({0: 2.0, 1: 2.0, 2: 2.0}, 1, 1)}
    noisy = (row("a", 1.0, 1.0), LadderRow("b", b, None))
    point, low, high = decision_accuracy(noisy, ("d64", "d128"), 1.0)["d64"]
    assert point == 1.0 and low == 0.0 and high == 1.0  # a seed draw of b's 0.5 alone ranks b first: seed noise shows
