"""Evaluation tags: the averaged weights' (`val_avg/*`, `test_avg/*`) are read like the trained weights' by the
ledger, the spec and the analysis."""

from __future__ import annotations

import json

import pytest

from contract.metrics import higher_is_better, on_test_split
from experiments.analysis.comparison import analyse, main_metric
from experiments.records.ledger import Ledger
from experiments.sweep.tuning import TuneError, parse_tune


@pytest.mark.parametrize(
    ("tag", "expected"),
    [("val/loss", "test/loss"), ("val_avg/acc@48", "test_avg/acc@48"), ("train/loss", "train/loss")],
)
def test_the_test_splits_tag_of_a_validation_tag(tag, expected):
    assert on_test_split(tag) == expected


def test_a_sweep_tuned_on_the_average_ranks_on_the_averages_test_loss(tmp_path):
    ledger = Ledger(tmp_path / "results.csv")
    for cell, raw, averaged in (("a", 2.0, 1.9), ("b", 1.95, 2.0)):
        ledger.put({"cell": cell, "seed": "0", "status": "done", "val/loss": repr(raw), "val_avg/loss": repr(averaged),
                    "test/loss": repr(raw), "test_avg/loss": repr(averaged)})  # fmt: skip
    info = {
        "cells": [{"name": "a", "overrides": {}}, {"name": "b", "overrides": {}}],
        "tune": {"metric": "val_avg/loss"},
    }
    analysis = analyse(ledger, info)
    assert {"val_avg/loss", "test_avg/loss"} <= set(analysis.metrics)
    assert main_metric(analysis.metrics, info) == "test_avg/loss" and not higher_is_better("test_avg/loss")
    assert main_metric(analysis.metrics, json.loads(json.dumps({"cells": []}))) == "val/loss"


def test_tuning_selects_on_either_validation_stage_only():
    assert parse_tune({"grid": {"model.optim.lr": [1e-3, 2e-3]}, "metric": "val_avg/loss"}, (0,), ()).metric == (
        "val_avg/loss"
    )
    with pytest.raises(TuneError, match="needs a val/\\* \\(or val_avg/\\*\\) metric"):
        parse_tune({"grid": {"model.optim.lr": [1e-3, 2e-3]}, "metric": "test_avg/loss"}, (0,), ())
