"""`python cli.py report DIR`: a sweep's report from its ledger and events (`experiments.analysis.sweep_report`)."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from experiments.analysis.sweep_report import build_report
from experiments.records.layout import LEDGER_NAME, REPORT_NAME, SUMMARY_DIR, SWEEP_INFO


def main(argv: list[str]) -> int:
    """`cli.py report DIR`; prints the main table. Returns the exit status."""
    parser = argparse.ArgumentParser(prog="cli.py report", description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="a sweep folder (holding results.csv)")
    args = parser.parse_args(argv)
    if not (args.dir / LEDGER_NAME).exists():
        print(f"error: {_not_a_sweep(args.dir)}", file=sys.stderr, flush=True)
        return 2
    print(build_report(args.dir))
    print(f"\nReport: {args.dir / REPORT_NAME}")
    print(f"TensorBoard (current runs, cell comparison, HParams): {tensorboard_command(args.dir / SUMMARY_DIR)}")
    return 0


def _not_a_sweep(folder: Path) -> str:
    """Why `folder` has no report, and what to pass or run instead."""
    above = next((d for d in folder.resolve().parents if (d / LEDGER_NAME).exists()), None)
    if above:
        return f"{folder / LEDGER_NAME} not found: {folder} is inside the sweep folder {above}; pass that"
    if not folder.is_dir():
        return f"{folder} does not exist; pass a sweep folder (the --out of `cli.py sweep SPEC --out DIR`)"
    if (folder / SWEEP_INFO).exists():
        return (f"{folder / LEDGER_NAME} not found: no run of the sweep in {folder} has ended yet; run its sweep "
                f"command again to resume it")  # fmt: skip
    return (f"{folder / LEDGER_NAME} not found: {folder} is not a sweep folder; `cli.py sweep SPEC --out {folder}` "
            f"makes one")  # fmt: skip


def tensorboard_command(logdir: Path | str) -> str:
    """The command that opens `logdir` from here: `tensorboard` where it is on PATH, else the one installed
    beside this interpreter (the Makefile's `.venv/bin/tensorboard`, not on PATH unless the venv is active)."""
    beside = Path(sys.executable).with_name("tensorboard")
    if shutil.which("tensorboard") or not beside.exists():
        return f"tensorboard --logdir {logdir}"
    shown = beside.relative_to(Path.cwd()) if beside.is_relative_to(Path.cwd()) else beside
    return f"{shown} --logdir {logdir}"
