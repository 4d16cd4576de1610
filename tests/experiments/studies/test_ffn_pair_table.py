"""The ffn_norm README's activation pairs and the ledger figures they are spelled with, from a synthetic ledger."""

from __future__ import annotations

import csv

import pytest

from experiments.studies import ledger_figures as fig
from experiments.studies.ffn_norm import pair_table

# (activation, norm) -> val/loss of seeds 0, 1, 2
LOSSES = {
    ("relu", "layernorm"): (1.50, 1.52, 1.51),
    ("gelu", "layernorm"): (1.52, 1.53, 1.52),
    ("swiglu", "layernorm"): (1.49, 1.50, 1.48),
    ("geglu", "layernorm"): (1.47, 1.49, 1.48),
    ("relu", "rmsnorm"): (1.51, 1.51, 1.51),
    ("gelu", "rmsnorm"): (1.53, 1.52, 1.53),
    ("swiglu", "rmsnorm"): (1.48, 1.49, 1.49),
    ("geglu", "rmsnorm"): (1.48, 1.48, 1.47),
}


def write_ledger(folder):
    keys = ["cell", "seed", "status", "model.arch.activation", "model.arch.norm", "val/loss"]
    with (folder / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, keys)
        writer.writeheader()
        for (act, norm), losses in LOSSES.items():
            for seed, loss in enumerate(losses):
                writer.writerow(dict(zip(keys, (f"activation={act},norm={norm}", seed, "done", act, norm, loss))))
        # a failed run of another seed: not a pair
        writer.writerow(dict(zip(keys, ("activation=relu,norm=layernorm", 3, "failed", "relu", "layernorm", ""))))


def test_pairs_are_per_seed_differences_with_their_interval(tmp_path, capsys):
    write_ledger(tmp_path)
    assert pair_table.main([str(tmp_path)]) == 0
    text = (tmp_path / "pair_table.md").read_text()
    assert text in capsys.readouterr().out
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if " − " in line.split(" | ")[0]}
    assert list(rows) == ["| SwiGLU − GELU", "| GEGLU − GELU", "| SwiGLU − ReLU", "| GEGLU − ReLU", "| GELU − ReLU",
                          "| GEGLU − SwiGLU"]  # fmt: skip
    layernorm, rmsnorm, paper = rows["| SwiGLU − ReLU"].removesuffix(" |").split(" | ")[1:4]
    # seeds 0, 1, 2: −0.01, −0.02, −0.03 → mean −0.02, sd 0.01: half-width t(0.975, 2) · 0.01 / √3 = 0.0248
    assert layernorm == "−0.010, −0.020, −0.030 → −0.020 [−0.045, +0.005], p = 0.074"
    assert rmsnorm.startswith("−0.030, −0.020, −0.020 → −0.023 [")
    assert paper == "−0.053"  # Shazeer: 1.944 − 1.997
    assert "seeds 0, 1, 2 →" in text  # the failed seed 3 is no seed of the table


def test_figures_are_spelled_as_the_readmes_spell_them(tmp_path):
    write_ledger(tmp_path)
    relu = fig.seeds(tmp_path, "activation=relu,norm=layernorm", "val/loss")
    assert relu == {0: 1.50, 1: 1.52, 2: 1.51}  # done runs only, in seed order
    with pytest.raises(KeyError, match="no done run"):
        fig.seeds(tmp_path, "activation=relu,norm=postnorm", "val/loss")
    assert (fig.signed(0.0484, 2), fig.signed(-0.0244), fig.number(-0.5, 1)) == ("+0.05", "−0.024", "−0.5")
    assert fig.mean_std([0.2, 0.3, 0.1], 2) == "0.20 ± 0.10"
    assert fig.span([-0.05, -0.024, -0.03]) == "−0.050–−0.024"
    assert fig.listed({0: 0.01, 1: -0.02}, 2, sign=True) == "+0.01, −0.02"
    c = fig.paired({0: 1.0, 1: 2.0, 2: 3.5}, {0: 0.5, 1: 1.0, 2: 2.0})
    assert fig.by_seed({0: 1.0, 1: 2.0, 2: 3.5}, {0: 0.5, 1: 1.0, 2: 2.0}) == [0.5, 1.0, 1.5]
    assert fig.difference(c, 2) == f"+1.00 [{fig.signed(c.ci_low, 2)}, {fig.signed(c.ci_high, 2)}]"
    assert fig.interval(c, 1, 100).startswith("[−")  # in points: 100× the interval
