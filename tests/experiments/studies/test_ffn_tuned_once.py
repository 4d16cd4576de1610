"""The tuned-once FFN ladder's comparison reads each ladder's verdict, fits, decision accuracy and cost from its
ledger (here the committed per-rung ladder, compared with itself)."""

from __future__ import annotations

import csv
from pathlib import Path

from experiments.studies.ffn_norm import tuned_once

LADDER = Path(__file__).resolve().parents[3] / "experiments/studies/ffn_norm/results/ffn_norm_ladder"


def test_each_ladder_gets_its_verdict_accuracy_fits_and_cost():
    rows = list(csv.DictReader((LADDER / "results.csv").open()))
    lines = tuned_once.comparison(LADDER)
    assert lines[0] == "### `ffn_norm_ladder`"
    assert lines[2].startswith("- **The gated FFNs' lead with size: ")
    steps = sum(int(float(r["steps"])) for r in rows if r["steps"])
    assert f"cost {len(rows)} runs, {steps:,} run-steps" in lines[3]
    assert lines[4].startswith("- decision accuracy against d160: d64 ")
    assert sum(line.startswith("- activation=") and " α " in line for line in lines) == 4


def test_the_script_writes_beside_the_first_ladder(tmp_path, capsys, monkeypatch):
    written = {}
    monkeypatch.setattr(Path, "write_text", lambda self, text: written.setdefault(self.name, text))
    assert tuned_once.main([str(LADDER), str(LADDER)]) == 0
    assert written["tuned_once.md"].count("### `ffn_norm_ladder`") == 2
