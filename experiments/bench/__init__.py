"""The suite's performance benchmark, run by `python cli.py bench [--smoke] [--out DIR] [--sections a,b]`
(`tools/bench.py`).

Sections (each a module of this package with `run(ctx) -> Section`):
  training    training-step tokens/s and MFU: suite GPT vs a plain reference and transformers GPT-2,
              every positional scheme and norm against its baseline, torch.compile (`--compile`)
  lightning   CausalLM + Trainer vs a plain loop, per-step overhead
  diagnostics the training diagnostics' cost: a probed step against an unprobed one, at the default period
  seqlen      sequence length 64 -> 2048 at fixed tokens per batch: time, memory, SDPA path; ALiBi and T5 ÷ none
              at T = 1,024 and 2,048 by heads and threads
  generation  256 greedy tokens with and without the KV cache, batch 1 and 32, every scheme
  vit         suite ViT vs timm VisionTransformer
  sweeps      two single-thread processes vs one two-thread process; the best `--jobs`
  ddp         DDP (gloo) with 2 processes × 1 thread vs 1 process × 2 threads, one global batch
  startup     a sweep's per-run start-up overhead: a fresh `cli.py fit` vs a fork of the warm process
  data        share of step time spent waiting for the text DataModule
  checkpointing  peak memory and time of a training step with and without activation checkpointing, by depth
  decoding    encoder-decoder greedy and beam decoding tokens/s on the KV cache, by encoder-decoder depth split
  coord_check the parametrizations' coordinate check: every layer's activation size against width (sp, mup) and
              depth (mup, completep) over a few Adam steps, with the slopes, figures and TensorBoard in --out
  sharding    FSDP2 memory per device: the computed plan of the GPU configs (1-8 devices) and the peak measured
              on 1, 2 and 4 CPU processes (gloo) against the plan of the same GPT

The run prints a markdown report (targets with PASS/FAIL first) and writes it, with a JSON copy
holding every sample, to `--out` (default experiments/bench/results/): bench.md and bench.json,
or bench-smoke.* in smoke mode. Every ratio is measured within the same run, interleaved (see
`timing.py`); the load average is recorded because other processes skew every figure. `--smoke`
uses tiny shapes and one repetition: it checks that every section runs, not speed.

Exit status: 0, or 1 when a section raised (its error is in the report) or, with `--strict`,
when a target failed.
"""

from __future__ import annotations

import datetime
import importlib
import json
import statistics
import sys
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path

import torch

from .common import Context, Settings
from .tables import Section, Table, targets_table
from .timing import load_average, machine_info, matmul_peak_flops

SECTIONS = {
    "training": "experiments.bench.training",
    "lightning": "experiments.bench.lightning_overhead",
    "diagnostics": "experiments.bench.diagnostics",
    "seqlen": "experiments.bench.seqlen",
    "generation": "experiments.bench.generation",
    "vit": "experiments.bench.vit",
    "sweeps": "experiments.bench.sweeps",
    "ddp": "experiments.bench.ddp",
    "startup": "experiments.bench.startup",
    "data": "experiments.bench.data",
    "token_store": "experiments.bench.token_store",
    "checkpointing": "experiments.bench.checkpointing",
    "decoding": "experiments.bench.decoding",
    "compile": "experiments.bench.compile",
    "quantize": "experiments.bench.quantize",
    "coord_check": "experiments.bench.coord_check",
    "sharding": "experiments.bench.sharding",
}
DEFAULT_OUT = Path(__file__).resolve().parent / "results"  # experiments/bench/results/, as documented


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


def run_benchmark(settings: Settings, keys: list[str], out: Path, command: str, strict: bool = False) -> int:
    """Runs the sections `keys` with `settings`, prints the report and writes it (Markdown and JSON) to `out`.

    Returns:
        The exit status: 1 when a section raised, or with `strict` when a target failed; else 0.
    """
    start = time.perf_counter()
    load_start = load_average()
    peak = matmul_peak_flops(settings.peak_size, settings.peak_tries)
    ctx = Context(settings, peak, out)
    sections = []
    with LoadSampler() as sampler:
        for key in keys:
            print(f"[bench] {key} ...", file=sys.stderr, flush=True)
            sections.append(run_section(key, ctx))
            print(f"[bench] {key} done in {sections[-1].seconds:.0f} s", file=sys.stderr, flush=True)
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": command,
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
    out.mkdir(parents=True, exist_ok=True)
    stem = "bench-smoke" if settings.smoke else "bench"
    (out / f"{stem}.md").write_text(markdown + "\n")
    report = {"meta": meta, "sections": [s.to_json() for s in sections]}
    (out / f"{stem}.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"[bench] wrote {out / stem}.md and .json", file=sys.stderr)
    failed = [s.key for s in sections if s.error]
    if failed:
        print(f"[bench] sections with errors: {', '.join(failed)}", file=sys.stderr)
        return 1
    if strict and any(t.passed is False for s in sections for t in s.targets):
        return 1
    return 0
