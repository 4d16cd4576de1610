"""Gradient norm of the last layer's weights at initialisation, Pre-LN vs Post-LN, by depth.

Xiong et al. 2020 (On Layer Normalization in the Transformer Architecture, Theorem 1 / Fig. 3):
with Post-LN the gradients of the parameters near the output stay large as depth grows, so a
large learning rate without warmup is unstable; with Pre-LN they shrink like 1/sqrt(L).

    python -m experiments.studies.norm_placement.grad_norm_at_init \
--out experiments/studies/norm_placement/results/norm_placement
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import get_args

import torch
import torch.nn.functional as F

from datamodules.text import TextDataModule
from models import GPT, ArchConfig
from models.config import NormPlacement


def last_layer_grad_norms(placement: str, depth: int, batch: dict, vocab: int, seed: int) -> dict[str, float]:
    torch.manual_seed(seed)
    cfg = ArchConfig(
        vocab_size=vocab,
        d_model=128,
        n_layers=depth,
        n_heads=4,
        max_seq_len=64,
        norm_placement=placement,
        scaled_residual_init=False,  # Xiong et al.'s analysis uses the plain Xavier-like init
    )
    model = GPT(cfg)
    logits = model(batch["input_ids"])
    F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten()).backward()
    last = model.stack.blocks[-1]
    return {
        "ffn_up": last.ffn.up.weight.grad.norm().item(),
        "ffn_down": last.ffn.down.weight.grad.norm().item(),
        "attn_qkv": last.attn.qkv.weight.grad.norm().item(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("experiments/studies/norm_placement/results/norm_placement"))
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--data-dir", default="../shared/data/tinyshakespeare")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = TextDataModule(corpus="tinyshakespeare", data_dir=args.data_dir, seq_len=64, batch_size=32)
    batch = next(iter(data.train_dataloader()))
    rows = []
    for placement in get_args(NormPlacement):
        for depth in args.depths:
            norms = [last_layer_grad_norms(placement, depth, batch, data.vocab_size, s) for s in range(args.seeds)]
            mean = {k: sum(n[k] for n in norms) / len(norms) for k in norms[0]}
            rows.append({"placement": placement, "depth": depth, **mean})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "grad_norm_at_init.json").write_text(json.dumps(rows, indent=2))
    lines = [
        f"Gradient norm of the last block's weights at initialisation (mean of {args.seeds} seeds, one batch of "
        "32×64 Tiny Shakespeare characters, d_model 128). "
        "Command: `python -m experiments.studies.norm_placement.grad_norm_at_init`.",
        "",
        "| placement | depth | ‖∇ FFN up‖ | ‖∇ FFN down‖ | ‖∇ attn qkv‖ |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r['placement']} | {r['depth']} | {r['ffn_up']:.4f} | {r['ffn_down']:.4f} | {r['attn_qkv']:.4f} |"
        for r in rows
    ]
    (args.out / "grad_norm_at_init.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
