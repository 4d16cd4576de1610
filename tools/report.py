"""`python cli.py report DIR`: a sweep's report from its ledger and events (`experiments.analysis.sweep_report`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments.analysis.sweep_report import build_report
from experiments.records.layout import LEDGER_NAME, REPORT_NAME, SUMMARY_DIR


def main(argv: list[str]) -> int:
    """`cli.py report DIR`; prints the main table. Returns the exit status."""
    parser = argparse.ArgumentParser(prog="cli.py report", description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="a sweep folder (holding results.csv)")
    args = parser.parse_args(argv)
    if not (args.dir / LEDGER_NAME).exists():
        print(f"error: {args.dir / LEDGER_NAME} not found", flush=True)
        return 2
    print(build_report(args.dir))
    print(f"\nReport: {args.dir / REPORT_NAME}")
    print(f"TensorBoard (current runs, cell comparison, HParams): tensorboard --logdir {args.dir / SUMMARY_DIR}")
    return 0
