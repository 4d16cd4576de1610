"""The Dynamic Tanh verdicts follow their specs' rules, on synthetic ledgers (no training)."""

from __future__ import annotations

import json

from experiments.records.ledger import Ledger
from experiments.studies.dyt import verdict

NOISE = (0.0, 0.002, -0.002, 0.001, -0.001)


def write_sweep(out, values: dict, sizes=("d64", "d128"), metric="test/loss"):
    """Final runs: each cell's value (test and validation alike) at every size, with a little seed noise."""
    out.mkdir(parents=True, exist_ok=True)
    names = [f"{cell},size={size}" for size in sizes for cell in values]
    (out / "sweep.json").write_text(json.dumps({"cells": [{"name": n, "overrides": {}} for n in names]}))
    ledger = Ledger(out / "results.csv")
    for size in sizes:
        for index, (cell, value) in enumerate(values.items()):
            for seed, noise in enumerate(NOISE[index:] + NOISE[:index]):  # each cell its own seed noise
                shown = repr(value + noise)
                ledger.put({"cell": f"{cell},size={size}", "seed": str(seed), "status": "done", metric: shown,
                            metric.replace("test/", "val/"): shown})  # fmt: skip
    return out


GPT = {"layernorm": 1.60, "rmsnorm": 1.601, "dyt-a0.5": 1.70, "dyt-a0.2": 1.603}
VIT = {"layernorm": 0.95, "rmsnorm": 0.951, "dyt-a0.5": 0.949}


def test_each_claim_is_labelled_by_the_stated_rule(tmp_path):
    lines = verdict.verdicts(write_sweep(tmp_path / "gpt", GPT), write_sweep(tmp_path / "vit", VIT, ("d32", "d64"),
                                                                             "test/acc"))  # fmt: skip
    # the better α0 (0.2, by validation loss) is level with LayerNorm; 0.5 is far worse: α0 matters
    assert lines[0].startswith("- **gpt: DyT matches LayerNorm: reproduced.** dyt-a0.2 − layernorm")
    assert lines[1].startswith("- **gpt: α0-sensitive: reproduced.**")
    assert lines[2].startswith("- gpt: rmsnorm − layernorm")
    assert lines[3].startswith("- **vit: DyT matches LayerNorm: reproduced.**")


def test_a_worse_vit_dyt_is_not_reproduced(tmp_path):
    lines = verdict.verdicts(write_sweep(tmp_path / "gpt", GPT),
                             write_sweep(tmp_path / "vit", VIT | {"dyt-a0.5": 0.90}, ("d32", "d64"), "test/acc"))
    assert lines[3].startswith("- **vit: DyT matches LayerNorm: not reproduced.**")


def test_a_post_hoc_vit_sweep_is_labelled_and_leaves_the_pre_registered_lines(tmp_path):
    gpt = write_sweep(tmp_path / "gpt", GPT)
    vit = write_sweep(tmp_path / "vit", VIT | {"dyt-a0.5": 0.90}, ("d32", "d64"), "test/acc")
    wide = write_sweep(tmp_path / "vit_wide", VIT, ("d32", "d64"), "test/acc")
    gpt_wide = write_sweep(tmp_path / "gpt_wide", GPT | {"dyt-a0.5": 1.603})
    lines = verdict.verdicts(gpt, vit, wide, gpt_wide)  # each post hoc folder's family is read from its cells
    assert lines[:5] == verdict.verdicts(gpt, vit)
    assert lines[5].startswith("- **vit, post hoc (vit_wide): DyT matches LayerNorm: reproduced.**")
    assert lines[6].startswith("- vit, post hoc (vit_wide): rmsnorm − layernorm")
    assert lines[7].startswith("- **gpt, post hoc (gpt_wide): DyT matches LayerNorm: reproduced.**")
    assert lines[8].startswith("- **gpt, post hoc (gpt_wide): α0-sensitive: not reproduced.**") and len(lines) == 10


def test_no_verdict_before_the_final_runs(tmp_path):
    for family in ("gpt", "vit"):
        (tmp_path / family).mkdir()
        (tmp_path / family / "sweep.json").write_text(json.dumps({}))
        Ledger(tmp_path / family / "results.csv").write()
    lines = verdict.verdicts(tmp_path / "gpt", tmp_path / "vit")
    assert all("have not ended" in line for line in lines) and len(lines) == 2
