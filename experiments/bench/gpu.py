"""GPU benchmark: a GPT-2-small-sized model (12 layers, d_model 768, 12 heads, seq 1024), bf16
autocast, training-step tokens/s and MFU against the GPU's measured bf16 matmul peak; the suite's
GPT (built from the transformers model by `models.interop.from_reference`, same weights) against
transformers' GPT2LMHeadModel (SDPA attention) of the same architecture.

    python -m experiments.bench.gpu [--out DIR] [--batch 16] [--reps 10] [--compile]
    python -m experiments.bench.gpu --smoke --device cpu     # checks the script's logic on a CPU

Runs in a few minutes on one modern GPU (well under 10). Without CUDA it prints why and exits
with status 1, measuring nothing. Writes gpu.md and gpu.json to --out (default
experiments/bench/results/).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from .common import TrainStep
from .mfu import SUITE, TrainingFlops, mfu_table
from .timing import interleaved, machine_info, matmul_peak_flops

DEFAULT_OUT = Path(__file__).resolve().parent / "results"  # experiments/bench/results/, as documented
SHAPES = {
    "full": {"vocab": 50304, "d_model": 768, "n_layers": 12, "n_heads": 12, "seq": 1024, "peak_size": 8192},
    "smoke": {"vocab": 64, "d_model": 32, "n_layers": 1, "n_heads": 2, "seq": 16, "peak_size": 256},
}


def build_hf(shape: dict, activation: str):
    from types import SimpleNamespace

    from .training import hf_gpt2

    dims = SimpleNamespace(
        vocab_size=shape["vocab"],
        seq_len=shape["seq"],
        d_model=shape["d_model"],
        n_layers=shape["n_layers"],
        n_heads=shape["n_heads"],
    )
    return hf_gpt2(dims, activation)


def fp32_cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """Next-token cross entropy on the bf16 logits cast to fp32."""
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def train_step(model, ids, labels, device: str, hf: bool):
    """The benchmark's training step (`common.TrainStep`: the suite's AdamW at lr 6e-4) under bf16
    autocast, synchronising the GPU at its end."""
    from lit_modules.optim import OptimConfig

    from .training import hf_forward

    model.to(device)
    return TrainStep(
        model,
        OptimConfig(lr=6e-4),
        forward=hf_forward if hf else None,
        loss=fp32_cross_entropy,
        autocast=(device, torch.bfloat16),
        sync=torch.cuda.synchronize if device == "cuda" else None,
    ).on(ids, labels)


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m experiments.bench.gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--batch", type=int, default=16, help="sequences per step (default 16: 16,384 tokens)")
    parser.add_argument("--reps", type=int, default=10, help="interleaved repetitions")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="also time the suite GPT under torch.compile")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu only to check the script")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, one repetition")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "experiments.bench.gpu: CUDA is not available on this machine (torch.cuda.is_available() is False); "
            "nothing was measured. Run it on a machine with an NVIDIA GPU (or `--smoke --device cpu` to check "
            "the script itself).",
            file=sys.stderr,
        )
        return 1
    from models.interop import from_reference

    shape = SHAPES["smoke" if args.smoke else "full"]
    reps, warmup, batch = (1, 1, 2) if args.smoke else (args.reps, args.warmup, args.batch)
    device = args.device
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    start = time.perf_counter()
    peak = matmul_peak_flops(shape["peak_size"], tries=5 if not args.smoke else 1, dtype=torch.bfloat16, device=device)

    hf = build_hf(shape, "gelu_new")
    suite = from_reference(hf)  # same weights, GELU tanh as a fused kernel
    hf_fused = build_hf(shape, "gelu_pytorch_tanh")
    hf_fused.load_state_dict(hf.state_dict())
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, shape["vocab"], (batch, shape["seq"] + 1), generator=g).to(device)
    ids, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    candidates = {
        SUITE: train_step(suite, ids, labels, device, hf=False),
        "transformers GPT-2 (gelu_new)": train_step(hf, ids, labels, device, hf=True),
        "transformers GPT-2 (gelu_pytorch_tanh)": train_step(hf_fused, ids, labels, device, hf=True),
    }
    cold = None
    if args.compile:
        compiled = torch.compile(copy.deepcopy(suite))
        candidates["suite GPT, torch.compile"] = train_step(compiled, ids, labels, device, hf=False)
        t0 = time.perf_counter()
        candidates["suite GPT, torch.compile"]()
        cold = time.perf_counter() - t0
    times = interleaved(candidates, reps, warmup)
    memory = {}
    if device == "cuda":
        for name, step in candidates.items():
            torch.cuda.reset_peak_memory_stats()
            step()
            memory[name] = torch.cuda.max_memory_allocated() / 2**30

    flops = TrainingFlops.of(suite, shape["seq"])
    table, results = mfu_table(
        times,
        ids.numel(),
        flops,
        peak,
        title=f"{shape['n_layers']} layers, d_model {shape['d_model']}, {shape['n_heads']} heads, "
        f"vocab {shape['vocab']}, seq {shape['seq']}, batch {batch}, bf16 autocast; "
        f"N = {flops.matmul_params:,} matmul params; measured bf16 matmul peak {peak / 1e12:.1f} TFLOP/s",
        last_column=("peak GiB", {name: f"{memory.get(name, float('nan')):.1f}" for name in times}),
    )
    device_name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    lines = [
        f"# GPU benchmark ({'smoke' if args.smoke else 'full'}) on {device_name}",
        "",
        f"- torch {torch.__version__}; {time.perf_counter() - start:.0f} s",
        "",
        table.markdown(),
    ]
    if cold is not None:
        lines += ["", f"- torch.compile cold start (first step): {cold:.1f} s"]
    markdown = "\n".join(lines)
    print(markdown)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "gpu-smoke" if args.smoke else "gpu"
    (args.out / f"{stem}.md").write_text(markdown + "\n")
    report = {
        "device": device_name,
        "machine": machine_info(),
        "shape": shape,
        "batch": batch,
        "peak_flops": peak,
        "matmul_params": flops.matmul_params,
        "results": results,
        "peak_memory_gib": memory,
        "compile_cold_s": cold,
    }
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
