"""RMSNorm vs LayerNorm speed on this CPU, op level (forward + backward of the norm alone) and
step level (a GPT training step), interleaved (ffn_norm study).

    python -m experiments.studies.ffn_norm.norm_speed --out experiments/studies/ffn_norm/results/ffn_norm
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from experiments.bench.common import TrainStep
from experiments.bench.timing import interleaved, load_average, ratio_range
from models import GPT, ArchConfig


def op_step(norm: torch.nn.Module, x: torch.Tensor):
    def run():
        norm(x).sum().backward()

    return run


def train_step(norm: str, batch: torch.Tensor):
    """The suite's training step (`experiments.bench.common.TrainStep`: the suite's AdamW) of a GPT
    with this norm, on next-token prediction over `batch`."""
    model = GPT(ArchConfig(vocab_size=65, d_model=128, n_layers=4, n_heads=4, max_seq_len=128, norm=norm))
    return TrainStep(model).on(batch[:, :-1], batch[:, 1:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    lines = [
        f"RMSNorm vs LayerNorm on this CPU ({torch.get_num_threads()} threads; load average at start "
        f"{load_average()}): median time of {args.reps} interleaved repetitions; ratio = RMSNorm ÷ LayerNorm "
        "(below 1: RMSNorm faster), with the range over paired repetitions. "
        "Command: `python -m experiments.studies.ffn_norm.norm_speed`.",
        "",
        "| level | shape | LayerNorm | RMSNorm | ratio (paired range) |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for shape in ((32 * 128, 128), (32 * 128, 768)):
        x = torch.randn(*shape, requires_grad=True)
        d = shape[1]
        t = interleaved(
            {"layernorm": op_step(torch.nn.LayerNorm(d), x), "rmsnorm": op_step(torch.nn.RMSNorm(d), x)},
            reps=args.reps,
            warmup=3,
            inner=20,
        )
        r = ratio_range(t["rmsnorm"], t["layernorm"])
        lines.append(
            f"| op: norm forward + backward | {shape[0]}×{shape[1]} | {t['layernorm'].median * 1e6:.0f} µs | "
            f"{t['rmsnorm'].median * 1e6:.0f} µs | {r[0]:.3f} ({r[1]:.2f}–{r[2]:.2f}) |"
        )
    batch = torch.randint(0, 65, (32, 129))
    t = interleaved(
        {"layernorm": train_step("layernorm", batch), "rmsnorm": train_step("rmsnorm", batch)},
        reps=args.reps,
        warmup=2,
    )
    r = ratio_range(t["rmsnorm"], t["layernorm"])
    lines.append(
        f"| step: GPT training step (d 128, 4 layers, seq 128, batch 32) | 4096 tokens | "
        f"{t['layernorm'].median * 1e3:.0f} ms | {t['rmsnorm'].median * 1e3:.0f} ms | "
        f"{r[0]:.3f} ({r[1]:.2f}–{r[2]:.2f}) |"
    )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "norm_speed.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
