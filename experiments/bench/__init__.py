"""The suite's performance benchmark: `python cli.py bench [--smoke] [--out DIR] [--sections a,b]`.

Sections (each a module of this package with `run(ctx) -> Section`):
  training    training-step tokens/s and MFU: suite GPT vs a plain reference and transformers GPT-2,
              every positional scheme and norm against its baseline, torch.compile (`--compile`)
  lightning   CausalLM + Trainer vs a plain loop, per-step overhead
  seqlen      sequence length 64 -> 2048 at fixed tokens per batch: time, memory, SDPA path
  generation  256 greedy tokens with and without the KV cache, batch 1 and 32, every scheme
  vit         suite ViT vs timm VisionTransformer
  sweeps      two single-thread processes vs one two-thread process; the best `--jobs`
  ddp         DDP (gloo) with 2 processes × 1 thread vs 1 process × 2 threads, one global batch
  startup     a sweep's per-run start-up overhead: a fresh `cli.py fit` vs a fork of the warm process
  data        share of step time spent waiting for the text DataModule
  checkpointing  peak memory and time of a training step with and without activation checkpointing, by depth
  decoding    encoder-decoder greedy and beam decoding tokens/s on the KV cache, by encoder-decoder depth split

The run prints a markdown report (targets with PASS/FAIL first) and writes it, with a JSON copy
holding every sample, to `--out` (default experiments/bench/results/): bench.md and bench.json,
or bench-smoke.* in smoke mode. Every ratio is measured within the same run, interleaved (see
`timing.py`); the load average is recorded because other processes skew every figure. `--smoke`
uses tiny shapes and one repetition: it checks that every section runs, not speed.

Exit status: 0, or 1 when a section raised (its error is in the report) or, with `--strict`,
when a target failed.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import statistics
import sys
import threading
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path

import torch

from .common import FULL, POSITIONAL_SCHEMES, SMOKE, Context
from .tables import Section, Table, targets_table
from .timing import load_average, machine_info, matmul_peak_flops

SECTIONS = {
    "training": "experiments.bench.training",
    "lightning": "experiments.bench.lightning_overhead",
    "seqlen": "experiments.bench.seqlen",
    "generation": "experiments.bench.generation",
    "vit": "experiments.bench.vit",
    "sweeps": "experiments.bench.sweeps",
    "ddp": "experiments.bench.ddp",
    "startup": "experiments.bench.startup",
    "data": "experiments.bench.data",
    "checkpointing": "experiments.bench.checkpointing",
    "decoding": "experiments.bench.decoding",
    "compile": "experiments.bench.compile",
    "quantize": "experiments.bench.quantize",
}
DEFAULT_OUT = Path(__file__).resolve().parent / "results"  # experiments/bench/results/, as documented


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cli.py bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, one repetition (checks that it runs)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"results folder (default {DEFAULT_OUT})")
    parser.add_argument(
        "--sections",
        type=lambda text: [w.strip() for w in text.split(",") if w.strip()],
        default=list(SECTIONS),
        help=f"comma-separated subset of: {','.join(SECTIONS)}",
    )
    parser.add_argument(
        "--compile", action="store_true", help="also time torch.compile (cold compile and steady state)"
    )
    parser.add_argument(
        "--reps", type=int, help="interleaved repetitions (default 7; caps seqlen's 3 and generation's 3/1)"
    )
    parser.add_argument(
        "--gen-uncached-schemes",
        type=lambda text: tuple(w.strip() for w in text.split(",") if w.strip()),
        help="generation: positional schemes that also run without the KV cache at batch > 1 "
        "(default: all; each costs ~20–60 s on 2 cores)",
    )
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    args = parser.parse_args(argv)
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown or not args.sections:
        parser.error(f"unknown section(s) {unknown or args.sections}; choose from {','.join(SECTIONS)}")
    bad = [p for p in args.gen_uncached_schemes or () if p not in POSITIONAL_SCHEMES]
    if bad:
        parser.error(f"unknown positional scheme(s) {bad}; choose from {','.join(POSITIONAL_SCHEMES)}")
    if args.reps is not None and args.reps < 1:
        parser.error("--reps must be at least 1")
    return args


def run_section(key: str, ctx: Context) -> Section:
    start = time.perf_counter()
    torch.manual_seed(0)
    try:
        section = importlib.import_module(SECTIONS[key]).run(ctx)
    except Exception:  # noqa: BLE001 (a failing section is reported, the others still run)
        section = Section(key, key, error=traceback.format_exc())
    section.seconds = time.perf_counter() - start
    section.data["load_average_after"] = load_average()
    return section


def render(meta: dict, sections: list[Section]) -> str:
    targets = Table(["section", "target", "measured", "threshold", "result", "detail"], title="Targets")
    for section in sections:
        for row in targets_table(section.targets).rows:
            targets.add(section.key, *row)
    load = meta["load_average_start"], meta["load_average_end"]
    lines = [
        f"# Benchmark ({'smoke' if meta['settings']['smoke'] else 'full'})",
        "",
        f"- {meta['date']}, {meta['wall_s']:.0f} s, `{meta['command']}`",
        (
            f"- {meta['machine']['cpu']}, {meta['machine']['cpu_count']} CPUs, torch {meta['machine']['torch']} "
            f"with {meta['machine']['torch_threads']} threads"
        ),
        (
            f"- load average (1, 5, 15 min) at start {_load(load[0])}, at end {_load(load[1])}; "
            f"1-min load during the run {_during(meta['load_1min_during'])}: with a load above "
            f"{meta['machine']['cpu_count']} other processes share these CPUs and slow every figure "
            "(ratios are interleaved, so both sides share the slowdown)"
        ),
        (
            f"- fp32 matmul peak measured at start: {meta['peak_flops'] / 1e9:.1f} GFLOP/s "
            f"({meta['settings']['peak_size']}³, best of {meta['settings']['peak_tries']})"
        ),
    ]
    if meta["settings"]["smoke"]:
        lines.append("- **smoke mode**: tiny shapes and one repetition; the figures say nothing about speed")
    lines += ["", targets.markdown() if targets.rows else "_no targets in these sections_", ""]
    for section in sections:
        load_after = section.data.get("load_average_after")
        lines += [section.markdown(), "", f"_load average after this section: {_load(load_after)}_", ""]
    return "\n".join(lines)


def _during(summary: dict | None) -> str:
    if summary is None:
        return "n/a"
    return f"min {summary['min']:.2f}, median {summary['median']:.2f}, max {summary['max']:.2f}"


def _load(load) -> str:
    return "n/a" if load is None else ", ".join(f"{x:.2f}" for x in load)


class LoadSampler:
    """Samples the 1-minute load average every `period` seconds while the benchmark runs."""

    def __init__(self, period: float = 5.0):
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period,), daemon=True)

    def _run(self, period: float) -> None:
        while True:
            load = load_average()
            if load is not None:
                self.samples.append(load[0])
            if self._stop.wait(period):
                return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict | None:
        if not self.samples:
            return None
        return {"min": min(self.samples), "median": statistics.median(self.samples), "max": max(self.samples)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    threads = torch.get_num_threads()
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        return _run(args, argv)
    finally:
        torch.set_num_threads(threads)


def _run(args: argparse.Namespace, argv: list[str] | None) -> int:
    settings = SMOKE if args.smoke else FULL
    settings = replace(settings, compile=args.compile and not args.smoke)
    if args.gen_uncached_schemes is not None:
        settings = replace(settings, gen_uncached_schemes=args.gen_uncached_schemes)
    if args.reps:

        def fewer(n: int) -> int:  # seqlen and generation run fewer repetitions by default
            return min(n, args.reps)

        settings = replace(
            settings,
            reps=args.reps,
            lightning_reps=args.reps,
            seq_reps=fewer(settings.seq_reps),
            gen_reps=tuple(map(fewer, settings.gen_reps)),
        )
    start = time.perf_counter()
    load_start = load_average()
    peak = matmul_peak_flops(settings.peak_size, settings.peak_tries)
    ctx = Context(settings, peak)
    sections = []
    with LoadSampler() as sampler:
        for key in args.sections:
            print(f"[bench] {key} ...", file=sys.stderr, flush=True)
            sections.append(run_section(key, ctx))
            print(f"[bench] {key} done in {sections[-1].seconds:.0f} s", file=sys.stderr, flush=True)
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": "python cli.py bench " + " ".join(sys.argv[1:] if argv is None else argv),
        "wall_s": time.perf_counter() - start,
        "machine": machine_info(),
        "load_average_start": load_start,
        "load_average_end": load_average(),
        "load_1min_during": sampler.summary(),
        "peak_flops": peak,
        "settings": asdict(settings),
    }
    markdown = render(meta, sections)
    print(markdown)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "bench-smoke" if settings.smoke else "bench"
    (args.out / f"{stem}.md").write_text(markdown + "\n")
    report = {"meta": meta, "sections": [s.to_json() for s in sections]}
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"[bench] wrote {args.out / stem}.md and .json", file=sys.stderr)
    failed = [s.key for s in sections if s.error]
    if failed:
        print(f"[bench] sections with errors: {', '.join(failed)}", file=sys.stderr)
        return 1
    if args.strict and any(t.passed is False for s in sections for t in s.targets):
        return 1
    return 0
