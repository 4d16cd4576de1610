"""`python cli.py samples DIR [--prompt TEXT]`: one prediction per cell of a sweep, side by side.

For each cell, its first seed's `checkpoints/last.ckpt` runs `cli.py predict` and the first record is shown:
every cell gets the same input (`--prompt`, else the data's first default input, the start of a
validation line), so a reader sees what each cell's model does with it: in the demo, how each positional
scheme continues the same prompt. Each run's `predictions.jsonl` holds its full output.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

from contract.run_folder import CONFIG_FILE, last_checkpoint
from experiments.records.layout import SWEEP_INFO
from lit_modules.prediction_writer import PREDICTIONS_FILE, short
from lit_modules.suite_cli import cli_main

QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
# one process, whatever the run trained on (a DDP or sharded run's config would start its processes from this one;
# a sharded run's checkpoint folder is then read consolidated: lit_modules.sharded_checkpoints)
ONE_PROCESS = ["--trainer.devices=1", "--trainer.num_nodes=1", "--trainer.strategy=auto"]


def cell_runs(sweep_dir: Path) -> list[tuple[str, Path]]:
    """(cell, run folder) of each cell with a checkpoint: its lowest seed's, cells in the spec's order."""
    info = sweep_dir / SWEEP_INFO
    if info.is_file():
        cells = [cell["name"] for cell in json.loads(info.read_text())["cells"]]
    else:
        cells = sorted(p.name for p in sweep_dir.iterdir() if p.is_dir())
    found = []
    for cell in cells:
        checkpoints = (sweep_dir / cell).glob("seed*/checkpoints/last.ckpt")
        runs = sorted((c.parent.parent for c in checkpoints), key=lambda r: int(re.sub(r"\D", "", r.name) or 0))
        if runs and (runs[0] / CONFIG_FILE).is_file():
            found.append((cell, runs[0]))
    return found


def predict_first(run: Path, prompt_file: Path | None, scratch: Path) -> dict[str, Any]:
    """`cli.py predict` on the run's last checkpoint, quietly; the first record it wrote."""
    args = [
        "predict", "--config", str(run / CONFIG_FILE), "--ckpt_path", str(last_checkpoint(run)),
        *QUIET,
        *ONE_PROCESS,
        # the predict command saves its own config.yaml in its log folder: a scratch one, not over the run's,
        # which re-runs the training
        f"--trainer.logger.init_args.save_dir={scratch}",
        *([f"--data.predict_file={prompt_file}"] if prompt_file else []),
    ]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        # in-process on purpose (one interpreter for all cells), and Lightning's own deprecation: noise here
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
        warnings.filterwarnings("ignore", message=".*treespec, LeafSpec.*")
        cli_main(args)
    with (run / PREDICTIONS_FILE).open(encoding="utf-8") as f:
        return json.loads(f.readline())


def _output(record: dict[str, Any]) -> str:
    output = record.get("filled", record["output"])  # a masked LM's filled-in input reads best
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    return short(text, 160) + (f"  [{record['note']}]" if "note" in record else "")


def main(argv: list[str]) -> int:
    """Prints one prediction per cell of the sweep folder; exit status 2 when it has no checkpoint, 1 when a
    cell fails (the others are still shown)."""
    parser = argparse.ArgumentParser(prog="cli.py samples", description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="a sweep folder (DIR/<cell>/seed<k>/checkpoints/last.ckpt)")
    parser.add_argument("--prompt", help="the input every cell gets (default: the data's first default input)")
    args = parser.parse_args(argv)
    runs = cell_runs(args.dir) if args.dir.is_dir() else []
    if not runs:
        print(f"error: no {args.dir}/<cell>/seed<k>/checkpoints/last.ckpt: run the sweep first", flush=True)
        return 2
    # Lightning's banners (devices, checkpoint restored) for every cell would bury the samples
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(logging.WARNING)
    samples, failed = {}, 0
    try:
        with tempfile.TemporaryDirectory() as scratch:
            prompt_file = None
            if args.prompt:
                prompt_file = Path(scratch) / "prompt.txt"
                prompt_file.write_text(args.prompt + "\n", encoding="utf-8")
            for cell, run in runs:
                try:
                    samples[cell] = predict_first(run, prompt_file, Path(scratch) / "logs")
                except Exception as e:  # one cell's failure must not hide the others' samples
                    samples[cell], failed = e, failed + 1
    finally:
        for log, level in zip(loggers, levels):
            log.setLevel(level)
    records = [r for r in samples.values() if isinstance(r, dict)]
    settings = {k: v for k, v in (records[0]["settings"] if records else {}).items() if k != "checkpoint"}
    print(f"\nOne sample per cell of {args.dir} (first seed, last checkpoint; {json.dumps(settings)})")
    same_input = len({r["input"] for r in records}) == 1
    if same_input:
        print(f"input: {short(records[0]['input'], 160)!r}")
    width = max(len(cell) for cell in samples)
    for cell, record in samples.items():
        if isinstance(record, Exception):
            print(f"  {cell:<{width}}  error: {type(record).__name__}: {record}")
        else:
            shown = _output(record) if same_input else f"{short(record['input'], 60)!r} -> {_output(record)}"
            print(f"  {cell:<{width}}  {shown}")
    return 1 if failed else 0
