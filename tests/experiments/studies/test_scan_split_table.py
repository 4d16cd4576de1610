"""The scan_length README's tables, from a synthetic ledger and EOS diagnosis."""

from __future__ import annotations

import csv

from experiments.studies.scan_length import split_table

# (split, scheme, seed) -> (exact match, token accuracy)
RUNS = {
    ("simple", "rope", 0): (0.934, 0.995),
    ("simple", "rope", 1): (0.950, 0.997),
    ("simple", "rope", 2): (0.900, 0.990),
    ("length", "rope", 0): (0.101, 0.800),
    ("simple", "t5", 1): (0.300, 0.920),  # seed order, not file order
    ("simple", "t5", 0): (0.200, 0.910),
}


def write_ledger(folder, extra=()):
    with (folder / "results.csv").open("w", newline="") as f:
        keys = ["cell", "seed", "status", "data.split", "model.arch.pos_encoding", "val/exact_match", "val/token_acc"]
        writer = csv.DictWriter(f, keys)
        writer.writeheader()
        for (split, scheme, seed), (exact, token) in RUNS.items():
            cell = f"split={split},pos_encoding={scheme}"
            writer.writerow(dict(zip(keys, (cell, seed, "done", split, scheme, exact, token))))
        writer.writerows(extra)


def test_exact_match_is_the_median_with_every_seed(tmp_path):
    failed = {"cell": "split=length,pos_encoding=rope", "seed": 1, "status": "failed", "data.split": "length",
              "model.arch.pos_encoding": "rope"}  # fmt: skip
    write_ledger(tmp_path, [failed])
    text = split_table.table(tmp_path)
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| ")}
    assert rows["| rope"] == "| rope | 93.4% (93.4, 95.0, 90.0) | 10.1% (10.1) | n/a | 0.994 / 0.800 / n/a |"
    assert rows["| t5"].startswith("| t5 | 25.0% (20.0, 30.0) | n/a | n/a | 0.915 /")
    assert "Decode outcomes" not in text  # no eos_diagnosis.md


def test_eos_shares_are_averaged_over_seeds_in_split_order(tmp_path):
    write_ledger(tmp_path)
    (tmp_path / "eos_diagnosis.md").write_text(
        "| cell | seed | exact | stopped early | overran | wrong |\n| --- | ---: | ---: | ---: | ---: | ---: |\n"
        "| split=length,pos_encoding=rope | 0 | 0.100 | 0.500 | 0.000 | 0.400 |\n"
        "| split=length,pos_encoding=rope | 1 | 0.200 | 0.300 | 0.100 | 0.400 |\n"
        "| split=simple,pos_encoding=rope | 0 | 0.900 | 0.050 | 0.050 | 0.000 |\n"
    )
    lines = split_table.table(tmp_path).splitlines()
    eos = lines[lines.index(next(line for line in lines if line.startswith("| split |"))) + 2 :]
    assert eos == [
        "| simple | rope | 1 | 0.900 | 0.050 | 0.050 | 0.000 |",
        "| length | rope | 2 | 0.150 | 0.400 | 0.050 | 0.400 |",
    ]
