"""The scan_length README's tables from a sweep folder: exact match per scheme and split (median over
seeds, each seed in brackets) with token accuracy, and, when the folder holds `eos_diagnosis.md`
(`scan_eos`), its outcome shares averaged over seeds per split and scheme.

    python -m experiments.studies.scan_length.split_table experiments/studies/scan_length/results/scan_length
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from contract.run_folder import DONE
from experiments.records.layout import LEDGER_NAME
from experiments.records.ledger import Ledger
from experiments.studies import table_script
from experiments.studies.scan_length.scan_eos import OUTCOMES

SPLITS = ("simple", "length", "cutoff26")
EOS_ROW = re.compile(r"^\| split=(\w+),pos_encoding=(\w+) \| (\d+) \| (.+) \|$")


def exact_match_table(sweep_dir: Path) -> list[str]:
    rows = [r for r in Ledger(sweep_dir / LEDGER_NAME).rows.values() if r["status"] == DONE]
    schemes = list(dict.fromkeys(r["model.arch.pos_encoding"] for r in rows))

    def values(scheme: str, split: str, key: str) -> list[float]:
        ordered = sorted(
            (int(r["seed"]), float(r[key]))
            for r in rows
            if r["model.arch.pos_encoding"] == scheme and r["data.split"] == split and r.get(key)
        )
        return [value for _, value in ordered]

    def exact(scheme: str, split: str) -> str:
        seeds = values(scheme, split, "val/exact_match")
        if not seeds:
            return "n/a"
        return f"{statistics.median(seeds):.1%} ({', '.join(f'{v * 100:.1f}' for v in seeds)})"

    def token_acc(scheme: str) -> str:
        means = [values(scheme, split, "val/token_acc") for split in SPLITS]
        return " / ".join(f"{statistics.mean(v):.3f}" if v else "n/a" for v in means)

    lines = [
        "Exact match of greedy decodes on 1,000 validation pairs: median over seeds (each seed, in seed "
        "order); token accuracy under teacher forcing, mean over seeds "
        f"(`python -m experiments.studies.scan_length.split_table {sweep_dir}`).",
        "",
        "| scheme | " + " | ".join(SPLITS) + " | token accuracy: " + " / ".join(SPLITS) + " |",
        "| --- |" + " ---: |" * (len(SPLITS) + 1),
    ]
    for scheme in schemes:
        lines.append(f"| {scheme} | " + " | ".join(exact(scheme, s) for s in SPLITS) + f" | {token_acc(scheme)} |")
    return lines


def eos_table(diagnosis: Path) -> list[str]:
    shares: dict[tuple[str, str], list[list[float]]] = {}
    for line in diagnosis.read_text().splitlines():
        if match := EOS_ROW.match(line):
            split, scheme, _, cells = match.groups()
            shares.setdefault((split, scheme), []).append([float(v) for v in cells.split(" | ")])
    lines = [
        f"Decode outcomes (`{diagnosis.name}`), mean over seeds:",
        "",
        "| split | scheme | seeds | " + " | ".join(OUTCOMES) + " |",
        "| --- | --- | ---: |" + " ---: |" * len(OUTCOMES),
    ]
    for split, scheme in sorted(shares, key=lambda key: (SPLITS.index(key[0]), key[1])):
        runs = shares[split, scheme]
        means = " | ".join(f"{statistics.mean(column):.3f}" for column in zip(*runs))
        lines.append(f"| {split} | {scheme} | {len(runs)} | {means} |")
    return lines


def table(sweep_dir: Path) -> str:
    lines = exact_match_table(sweep_dir)
    if (sweep_dir / "eos_diagnosis.md").exists():
        lines += ["", *eos_table(sweep_dir / "eos_diagnosis.md")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return table_script.run(argv, __doc__, table, "split_table.md")


if __name__ == "__main__":
    raise SystemExit(main())
