"""The report names the commit behind every cell, and warns when the cells compared ran on different code."""

from __future__ import annotations

import csv
import json

from experiments.analysis import sweep_report as report
from tests.run_records import write_record

A, B = "a" * 40, "b" * 40
WARNING = "may not have run the same code"


def make_sweep(tmp_path, commits, column=True):
    """A two-cell sweep, two seeds each; `commits[cell]` lists its runs' git_commit, in the ledger's
    `git_commit` column or (column=False: a ledger older than it) only in each run's run.json."""
    columns = ["cell", "seed", "status", "val/loss", "params"] + (["git_commit"] if column else []) + ["error"]
    with (tmp_path / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for cell, runs in commits.items():
            for seed, commit in enumerate(runs):
                row = {"cell": cell, "seed": seed, "status": "done", "val/loss": 2.0 + seed / 10 + len(cell) / 100}
                writer.writerow(row | {"params": 1000, "error": ""} | ({"git_commit": commit} if column else {}))
                write_record(tmp_path / cell / f"seed{seed}", git_commit=commit)
    cells = [{"name": cell, "overrides": {"model.arch.norm": cell}} for cell in commits]
    (tmp_path / "sweep.json").write_text(json.dumps({"cells": cells, "baseline": "ln", "axes": ["model.arch.norm"]}))
    return tmp_path


def header(out):
    text = (out / "report.md").read_text()
    return text.split("## Results")[0]


def test_one_clean_commit_is_named_without_warning(tmp_path):
    out = make_sweep(tmp_path, {"ln": [A, A], "rms": [A, A]})
    printed = report.build_report(out)
    assert f"- code: every run at git commit `{A[:12]}`" in header(out)
    assert WARNING not in header(out) and WARNING not in printed


def test_different_commits_or_dirty_runs_are_named_per_cell_and_warned(tmp_path):
    out = make_sweep(tmp_path, {"ln": [A, A], "rms": [B, f"{A}-dirty"]})
    printed = report.build_report(out)
    text = header(out)
    assert f"  - `ln`: `{A[:12]}` ×2" in text
    assert f"  - `rms`: `{B[:12]}` ×1, `{A[:12]}-dirty` ×1" in text
    assert WARNING in text and "2 commits" in text and "1 of 4 runs from a dirty tree" in text
    assert WARNING in printed  # the sweep prints it at its end too
    assert text.count(WARNING) == 1


def test_one_dirty_commit_is_still_a_warning(tmp_path):
    out = make_sweep(tmp_path, {"ln": [f"{A}-dirty"] * 2, "rms": [f"{A}-dirty"] * 2})
    report.build_report(out)
    text = header(out)
    assert f"every run at git commit `{A[:12]}-dirty`" in text
    assert WARNING in text and "4 of 4 runs from a dirty tree" in text and "commits (" not in text


def test_older_ledgers_read_each_runs_run_json(tmp_path):
    out = make_sweep(tmp_path, {"ln": [A, A], "rms": [B, B]}, column=False)
    report.build_report(out)
    text = header(out)
    assert f"  - `rms`: `{B[:12]}` ×2" in text and WARNING in text and "2 commits" in text
    for run_json in out.glob("*/seed*/run.json"):
        run_json.unlink()
    report.build_report(out)
    assert "4 of 4 runs with no recorded commit" in header(out)


def test_a_failed_run_that_recorded_no_commit_neither_warns_nor_ranks(tmp_path):
    """A run that failed before training (a bad config) compares nothing: no code warning, and its cell, with no
    value, is listed last without a rank."""
    out = make_sweep(tmp_path, {"ln": [A, A], "rms": [A, A]})
    with (out / "results.csv").open("a", newline="") as f:
        f.write("bad,0,failed,,,,error: model: pos_encoding='alibi' is not supported by ViT\n")
    info = json.loads((out / "sweep.json").read_text())
    info["cells"].append({"name": "bad", "overrides": {"model.arch.norm": "bad"}})
    (out / "sweep.json").write_text(json.dumps(info))
    report.build_report(out)
    text = (out / "report.md").read_text()
    assert WARNING not in text and f"every run at git commit `{A[:12]}`" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`bad`" in line]
    assert rows and rows[0].startswith("| – | `bad` | 0/1, 1 failed |"), rows
    ranks = [line.split(" | ")[0] for line in text.splitlines() if line.startswith(("| 1", "| 2"))]
    assert len(ranks) >= 2  # the two cells with values keep ranks 1 and 2
