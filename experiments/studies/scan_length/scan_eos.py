"""Why do SCAN length-split decodes fail? (scan_length study; Newman et al. 2020, Csordás et al. 2021)

Classifies each greedy decode of the validation pairs as exact; a correct prefix that stopped too
early, or the correct sequence continued past its end (both are end-of-sequence errors); or wrong.

    python -m experiments.studies.scan_length.scan_eos experiments/studies/scan_length/results/scan_length
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import torch
import yaml

from contract.run_folder import CONFIG_FILE, last_checkpoint
from datamodules.translation import TranslationDataModule
from lit_modules import Translation
from lit_modules.translation import until_eos
from models.config import IGNORE_INDEX

OUTCOMES = ("exact", "stopped early", "overran", "wrong")


def eos_outcome(hypothesis: list[int], reference: list[int]) -> str:
    if hypothesis == reference:
        return "exact"
    if len(hypothesis) < len(reference) and reference[: len(hypothesis)] == hypothesis:
        return "stopped early"
    if len(hypothesis) > len(reference) and hypothesis[: len(reference)] == reference:
        return "overran"
    return "wrong"


@torch.no_grad()
def diagnose(run_dir: Path) -> Counter:
    config = yaml.safe_load((run_dir / CONFIG_FILE).read_text())
    data = TranslationDataModule(**config["data"]["init_args"])
    model = Translation.load_from_checkpoint(last_checkpoint(run_dir), map_location="cpu").eval()
    counts: Counter = Counter()
    for batch in data.val_dataloader():
        max_len = batch["tgt_out"].shape[1] + model.max_decode_extra
        decoded = model.model.beam_search(
            batch["src_ids"], batch["src_mask"], model.bos_id, model.eos_id, max_len, beam_size=1
        )
        for row, target in zip(decoded.tolist(), batch["tgt_out"].tolist()):
            reference = [t for t in target if t != IGNORE_INDEX][:-1]  # drop the EOS label
            counts[eos_outcome(until_eos(row, model.eos_id), reference)] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--split", default="*", help="only cells of this split (default: every split)")
    args = parser.parse_args(argv)
    print("| cell | seed | " + " | ".join(OUTCOMES) + " |")
    print("| --- | ---: |" + " ---: |" * len(OUTCOMES))
    for ckpt in sorted(args.sweep_dir.glob(f"split={args.split},*/seed*/checkpoints/last.ckpt")):
        run_dir = ckpt.parents[1]
        counts = diagnose(run_dir)
        total = sum(counts.values())
        shares = " | ".join(f"{counts[o] / total:.3f}" for o in OUTCOMES)
        print(f"| {run_dir.parent.name} | {run_dir.name.removeprefix('seed')} | {shares} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
