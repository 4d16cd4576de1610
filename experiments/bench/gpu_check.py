"""The one GPU check (`make gpu-check`), prepared so that the minutes a GPU is lent go to measuring: each
family's `configs/<family>/gpu.yaml` model trained in bf16 (tokens/s, MFU, peak memory), the SDPA kernel each
positional scheme reaches, ALiBi's and T5's bias per distance (flex_attention) against a dense mask at long
context (time, memory, gradient parity), the KV cache's generation speed-up, FSDP2's peak memory per device
against the computed plan (on a node with ≥ 2 GPUs), and a short GPT ladder (3 sizes × 2 schemes) through the
sweep engine.

    python -m experiments.bench.gpu_check                 # on a GPU: under 8 minutes, writes results/gpu/
    python -m experiments.bench.gpu_check --dry           # CPU, tiny shapes, seconds: checks every part runs
    python -m experiments.bench.gpu_check --parts sdpa,kv_cache

Writes `gpu_check.md` (tables), `gpu_check.json` (raw numbers, machine, versions) and `gpu_check-ladder.md` (the
ladder sweep's report) to `--out` (default `experiments/bench/results/gpu/`; a dry run writes `gpu_check-dry*`),
each time a part ends. Each part is timed and a failed part is recorded with its error while the others still
run: a lent GPU's minutes are not lost to one bug. `--budget-s` starts no part past it (the ladder, last, gets
what is left), and a part that needs a newer torch than the machine's is skipped with the reason
(`NEEDS_TORCH`). On the lent GPU machine, `scripts/gpu_check_device.sh` runs it with the carried wheels.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .gpu_parts import DEFAULT_OUT, DRY, FAMILIES, FULL, PARTS, Check, Skipped  # noqa: F401 - FAMILIES: the tests read it
from .timing import machine_info

# the torch release each part needs, and why: the GPU machine's python3 may be older than this machine's
NEEDS_TORCH = {
    "score_bias": ((2, 6), "flex_attention with a score_mod whose captured bias table gets a gradient"),
}


def torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int(minor)


@dataclass
class Outcome:
    name: str
    seconds: float
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    skipped: str | None = None  # why the part did not run (torch too old, the budget spent)


def run_part(check: Check, name: str, out_dir: Path, seconds_left: float | None) -> Outcome:
    """One part, timed; a part that raises is recorded with its error (the next one still runs)."""
    needs = NEEDS_TORCH.get(name)
    if needs and torch_version() < needs[0]:
        return Outcome(name, 0.0, skipped=f"needs torch >= {'.'.join(map(str, needs[0]))} ({needs[1]}); "
                                           f"this is {torch.__version__}")  # fmt: skip
    if seconds_left is not None and seconds_left <= 0:
        return Outcome(name, 0.0, skipped="not started: the check's --budget-s was spent")
    start = time.perf_counter()
    try:
        args = (check, out_dir, seconds_left) if name == "ladder" else (check,)
        outcome = Outcome(name, 0.0, PARTS[name](*args))
    except Skipped as why:  # e.g. FSDP on a node with one GPU
        outcome = Outcome(name, 0.0, skipped=str(why))
    except Exception:  # noqa: BLE001 - a lent GPU's other parts must still run
        outcome = Outcome(name, 0.0, error=traceback.format_exc(limit=3))
    outcome.seconds = time.perf_counter() - start
    return outcome


def run_parts(check: Check, names: list[str], out_dir: Path, budget_s: float | None = None) -> list[Outcome]:
    """Each part in turn, its results written as it ends (a run cut short keeps the parts before it); a part
    that would start after `budget_s` seconds is skipped, and the ladder gets only what is left."""
    start, outcomes = time.perf_counter(), []
    for name in names:
        left = None if budget_s is None else budget_s - (time.perf_counter() - start)
        outcomes.append(run_part(check, name, out_dir, left))
        write(check, outcomes, out_dir)
    return outcomes


def versions() -> dict[str, str]:
    """The versions the check runs with (the GPU machine's own python3 may differ from this machine's)."""
    names = ("lightning", "torchmetrics", "jsonargparse", "timm", "numpy")
    out = {"torch": torch.__version__, "cuda": str(torch.version.cuda), "python": sys.version.split()[0]}
    return out | {n: importlib.metadata.version(n) for n in names}


def write(check: Check, outcomes: list[Outcome], out_dir: Path) -> str:
    """`gpu_check.md` and `gpu_check.json` (`-dry` when dry) in `out_dir`; returns the Markdown."""
    text = markdown(check, outcomes)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = "gpu_check-dry" if check.dry else "gpu_check"
    (out_dir / f"{stem}.md").write_text(text)
    parts = {o.name: {"seconds": o.seconds, "result": o.result, "error": o.error, "skipped": o.skipped}
             for o in outcomes}  # fmt: skip
    raw = {"check": {k: str(v) for k, v in vars(check).items()}, "machine": machine_info(), "versions": versions(),
           "parts": parts}  # fmt: skip
    (out_dir / f"{stem}.json").write_text(json.dumps(raw, indent=2, default=str) + "\n")
    return text


def markdown(check: Check, outcomes: list[Outcome]) -> str:
    """The tables of `gpu_check.md`."""
    device = torch.cuda.get_device_name() if check.device == "cuda" else "CPU (dry run: tiny shapes)"
    command = f"`python -m experiments.bench.gpu_check{' --dry' if check.dry else ''}`"
    timings = ", ".join(f"{o.name} {o.seconds:.0f} s" for o in outcomes)
    shown = ", ".join(f"{k} {v}" for k, v in versions().items())
    lines = [f"# GPU check on {device}", "", f"- {command}; parts: {timings}", f"- versions: {shown}"]
    for o in outcomes:
        lines += ["", f"## {o.name}", ""]
        if o.skipped:
            lines += [f"Skipped: {o.skipped}."]
        elif o.error:
            lines += ["Failed:", "", "```", o.error.strip(), "```"]
        elif o.name == "throughput":
            lines += [f"bf16 matmul peak measured: {o.result['peak_flops'] / 1e12:.1f} TFLOP/s", "",
                      "| family (gpu.yaml) | parameters | step, ms | tokens/s | MFU | peak GiB |",
                      "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
            for fam, r in o.result["families"].items():
                lines.append(f"| {fam} | {r['params']:,} | {r['step_s'] * 1e3:.1f} | {r['tokens_per_s']:,.0f} | "
                             f"{r['mfu']:.1%} | {r['peak_gib']:.2f} |")  # fmt: skip
        elif o.name == "sdpa":
            lines += ["| scheme | SDPA implementation(s) | mask handed to SDPA |", "|---|---|---|"]
            lines += [f"| {s} | {', '.join(r['kernels']) or '—'} | {r['mask'] or 'none (is_causal)'} |"
                      for s, r in o.result.items()]  # fmt: skip
        elif o.name == "score_bias":
            lines += ["| scheme, T | blockwise: ms, peak GiB | dense mask: ms, peak GiB | max gradient difference |",
                      "|---|---|---|---:|"]  # fmt: skip
            for name, row in o.result.items():
                cells = [row[p].get("error") or f"{row[p]['s'] * 1e3:.1f}, {row[p]['peak_gib']:.2f}"
                         for p in ("blockwise", "math")]  # fmt: skip
                lines.append(f"| {name} | " + " | ".join(cells) + f" | {row.get('max_grad_diff', float('nan')):.2e} |")
        elif o.name == "kv_cache":
            lines += ["| scheme | cached, s | uncached, s | speed-up | same tokens |", "|---|---:|---:|---:|---|"]
            lines += [f"| {s} | {r['cached_s']:.3f} | {r['uncached_s']:.3f} | {r['speedup']:.1f}× | "
                      f"{r['same_tokens']} |" for s, r in o.result.items()]  # fmt: skip
        elif o.name == "fsdp":
            from .gpu_fsdp import markdown as fsdp_lines

            lines += fsdp_lines(o.result)
        elif o.name == "ladder":
            sizes = o.result["sizes"]
            lines += [f"`{o.result['metric']}` (non-embedding parameters) by size; the sweep's report: "
                      f"`{o.result['report']}`", "", "| cell | " + " | ".join(sizes) + " |",
                      "|---|" + "---:|" * len(sizes)]  # fmt: skip
            for cell, by_size in o.result["cells"].items():
                shown = [f"{by_size[s]['mean']:.4f} ({by_size[s]['params']:,.0f})" if s in by_size else "—"
                         for s in sizes]  # fmt: skip
                lines.append(f"| {cell} | " + " | ".join(shown) + " |")
            lines += ["", "Ranking (best first): " + "; ".join(f"{size}: {', '.join(r)}"
                                                          for size, r in o.result["rankings"].items())]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.bench.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry", action="store_true", help="CPU, tiny shapes: check that every part runs")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, from {list(PARTS)}")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--budget-s", type=float, help="start no part after this many seconds (the ladder, last, "
                        "gets what is left): a device call's time limit cuts no finished part")  # fmt: skip
    args = parser.parse_args(argv)
    names = [p for p in args.parts.split(",") if p]
    unknown = [p for p in names if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {unknown}; choose from {list(PARTS)}")
    check = DRY if args.dry else FULL
    if not args.dry and not torch.cuda.is_available():
        print("gpu_check: CUDA is not available here (torch.cuda.is_available() is False); nothing was measured. "
              "Run it on a GPU machine, or `--dry` to check the script on this CPU.", file=sys.stderr)  # fmt: skip
        return 1
    if check.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    outcomes = run_parts(check, names, args.out, args.budget_s)
    print(markdown(check, outcomes))
    return 1 if any(o.error for o in outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
