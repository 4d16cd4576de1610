"""The PEFT study's plot: each method at its best learning rate, from synthetic ledgers."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from experiments.studies.peft import trainable_plot

COLUMNS = ["cell", "seed", "status", "model.optim.lr", "params", "params_trainable", "val/loss", "error"]
# method -> (trainable parameters, {lr: final val/loss of seeds 0, 1, 2})
METHODS = {
    "full": (111104, {"0.001": [2.10, 2.12, 2.11], "0.003": [2.30, 2.28, 2.31]}),
    "lora_r4": (1536, {"0.001": [2.40, 2.42, 2.41], "0.003": [2.25, 2.27, 2.26]}),
    "head_only": (6912, {"0.001": [2.90, 2.90, 2.90], "0.003": [2.80, 2.82, 2.84]}),
}


def write_ledger(folder: Path, methods: dict) -> None:
    folder.mkdir(parents=True)
    with (folder / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        for method, (trainable, by_lr) in methods.items():
            for lr, losses in by_lr.items():
                for seed, loss in enumerate(losses):
                    row = {"cell": f"{method}-lr{lr}", "seed": seed, "status": "done", "model.optim.lr": lr}
                    writer.writerow(row | {"params": 111104, "params_trainable": trainable, "val/loss": loss})
        # a failed run is neither averaged nor able to win its learning rate
        writer.writerow({"cell": "lora_r4-lr0.001", "seed": 3, "status": "failed", "model.optim.lr": "0.001",
                         "params": 111104, "params_trainable": 1536, "val/loss": "", "error": "boom"})  # fmt: skip


def test_each_method_at_its_best_learning_rate(tmp_path):
    write_ledger(tmp_path / "peft_gpt", METHODS)
    points = {p.method: p for p in trainable_plot.best_points(trainable_plot.read_rows(tmp_path / "peft_gpt"))}
    assert list(points) == ["full", "lora_r4", "head_only"]
    assert (points["full"].lr, points["lora_r4"].lr, points["head_only"].lr) == ("0.001", "0.003", "0.003")
    assert points["lora_r4"].trainable == 1536 and points["lora_r4"].n == 3
    assert points["lora_r4"].mean == pytest.approx(2.26) and points["lora_r4"].std == pytest.approx(0.01)
    assert points["full"].others == pytest.approx({"0.001": 2.11, "0.003": 2.2966667})


def test_writes_one_panel_per_sweep_under_the_common_parent(tmp_path, capsys):
    write_ledger(tmp_path / "results" / "peft_gpt", METHODS)
    write_ledger(tmp_path / "results" / "peft_bert", METHODS)
    assert trainable_plot.main([str(tmp_path / "results" / "peft_gpt"), str(tmp_path / "results" / "peft_bert")]) == 0
    png = tmp_path / "results" / "plots" / "loss_vs_trainable.png"
    assert png.read_bytes().startswith(b"\x89PNG")
    table = png.with_suffix(".md").read_text()
    assert "| peft_bert | lora_r4 | 1,536 | 0.003 | 2.2600 ± 0.0100 | 3 | 2.4100 | 2.2600 |" in table
    assert table in capsys.readouterr().out


def test_a_ledger_without_trainable_counts_is_refused(tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "results.csv").write_text("cell,seed,status,params,val/loss\nfull,0,done,10,2.0\n")
    with pytest.raises(SystemExit, match="params_trainable"):
        trainable_plot.main([str(folder)])


def test_each_method_is_paired_with_full_fine_tuning_by_seed(tmp_path, capsys):
    methods = METHODS | {"adapter": (4384, {"0.003": [2.112, 2.133, 2.122]})}  # +0.012 or +0.013 in every seed
    write_ledger(tmp_path / "peft_gpt", methods)
    assert trainable_plot.main([str(tmp_path / "peft_gpt")]) == 0
    rows = {
        line.split(" | ")[1]: line for line in capsys.readouterr().out.splitlines() if line.startswith("| peft_gpt")
    }
    # lora_r4 at 0.003 (2.25, 2.27, 2.26) - full at 0.001 (2.10, 2.12, 2.11): +0.15 in every seed
    assert "| +0.1500 |" in rows["lora_r4"] and rows["lora_r4"].endswith("| worse |")
    assert rows["adapter"].endswith("| matches (worse by < margin) |")
    comparison = trainable_plot.paired_difference({0: 1.0, 1: 1.1, 2: 0.9}, {0: 1.2, 1: 1.3, 2: 1.1})
    assert trainable_plot.verdict(comparison) == "better"


def test_a_panel_joins_a_sweep_and_its_extension(tmp_path, capsys):
    write_ledger(tmp_path / "peft_gpt", METHODS)
    write_ledger(tmp_path / "peft_gpt_high_lr", {"lora_r4": (1536, {"0.01": [2.05, 2.07, 2.06]})})
    assert trainable_plot.main([f"{tmp_path / 'peft_gpt'},{tmp_path / 'peft_gpt_high_lr'}"]) == 0
    table = (tmp_path / "plots" / "loss_vs_trainable.md").read_text()
    # one panel: lora_r4 now at its best of three learning rates, 2.06 at 0.01
    assert "| peft_gpt | lora_r4 | 1,536 | 0.01 | 2.0600 ± 0.0100 | 3 |" in table
    assert not any(line.startswith("| peft_gpt_high_lr") for line in table.splitlines())
