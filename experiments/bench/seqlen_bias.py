"""The score-bias schemes (ALiBi, T5) against no positions at the lengths where attention dominates a step:
time and peak memory ÷ `none`'s, per head count and thread count, the three schemes' steps interleaved so that
a busy machine slows each alike; the load average is recorded with each cell.

With T5 split at its last bucket (`models.far_bias`), a profiled step also gives where its attention's time
goes (the far keys, the band, the merge, and their backwards) next to `none`'s fused kernel.
"""

from __future__ import annotations

import os
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from models import GPT

from .common import TrainStep, profile_step, token_batch
from .tables import Table, Target
from .timing import interleaved

SCHEMES = ("none", "alibi", "t5")
TIME_TARGET, MEMORY_TARGET = 1.2, 1.1
# profiler ranges of a step: `models.far_bias`'s labels, and SDPA's fused CPU kernel forward and backward
PARTS = {
    "far_bias.far": "far keys (fused causal)",
    "far_bias.band": "band (per block, masked)",
    "far_bias.merge": "merge (log-sum-exp)",
    "far_bias.far_backward": "far keys backward (fused)",
    "far_bias.band_backward": "band backward (recomputed)",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "SDPA forward",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": "SDPA backward",
}


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _parts_ms(step) -> dict[str, float]:
    """CPU ms per labelled range of one profiled step (a part nested in another is counted in both)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    totals: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        if event.key in PARTS:
            totals[PARTS[event.key]] += event.cpu_time_total / 1e3
    return dict(totals)


def bias_grid(s) -> tuple[list[Table], list[Target], list[str], dict]:
    """Every (heads, threads, T) of the settings' bias grid: the tables, the targets and the raw numbers."""
    threads_before = torch.get_num_threads()
    data: dict = {"cells": []}
    ratios = Table(
        ["heads", "threads", "T", "alibi time", "t5 time", "alibi memory", "t5 memory", "none ms", "load (1/5/15 min)"],
        title=f"Score bias ÷ none, {s.seq_tokens} tokens per batch, median of {s.seq_reps} interleaved steps",
    )
    parts = Table(
        ["heads", "threads", "T", "scheme", "part", "ms per step (profiled)"], title="Where attention's time goes"
    )
    targets = []
    try:
        for heads in s.seq_bias_heads:
            for T in s.seq_bias_lengths:
                ids, labels = token_batch(s.seq_tokens // T, T, s.vocab_size)
                steps, memory = {}, {}
                for pos in SCHEMES:
                    torch.manual_seed(0)
                    model = GPT(s.arch(pos_encoding=pos, n_heads=heads, max_seq_len=T))
                    steps[pos] = TrainStep(model).on(ids, labels)
                    steps[pos]()  # the optimiser's state and the scheme's per-length caches now exist
                    memory[pos], _ = profile_step(steps[pos])
                for threads in s.seq_bias_threads:
                    torch.set_num_threads(threads)
                    load = _load()
                    times = interleaved(steps, s.seq_reps, warmup=1)
                    load = f"{load} → {_load()}"
                    t = {pos: times[pos].median for pos in SCHEMES}
                    m = {pos: memory[pos] / max(memory["none"], 1) for pos in SCHEMES}
                    ratios.add(heads, threads, T, *(f"{t[p] / t['none']:.3f}" for p in SCHEMES[1:]),
                               *(f"{m[p]:.3f}" for p in SCHEMES[1:]), f"{t['none'] * 1e3:.4g}", load)  # fmt: skip
                    cell = {"heads": heads, "threads": threads, "T": T, "load": load, "peak_bytes": memory}
                    cell["timing"] = {pos: times[pos].to_json() for pos in SCHEMES}
                    for pos in ("none", "t5"):
                        cell[f"{pos}_parts_ms"] = split = _parts_ms(steps[pos])
                        for part, ms in split.items():
                            parts.add(heads, threads, T, pos, part, f"{ms:.1f}")
                    data["cells"].append(cell)
                    for pos in SCHEMES[1:]:
                        where = f"{heads} heads, {threads} thread(s), T={T}"
                        targets.append(Target(f"{pos}: step time ÷ none, {where}", t[pos] / t["none"], TIME_TARGET,
                                              higher_is_better=False, detail=f"load {load}"))  # fmt: skip
                        if threads == s.seq_bias_threads[0]:  # memory does not depend on the threads
                            targets.append(Target(f"{pos}: peak memory ÷ none, {heads} heads, T={T}", m[pos],
                                                  MEMORY_TARGET, higher_is_better=False))  # fmt: skip
    finally:
        torch.set_num_threads(threads_before)
    notes = [
        "Score bias ÷ none: the three schemes' steps alternate (A B C, B C A, …), so load from other processes "
        "slows each alike; the load average before → after each cell is in the table. Peak memory is one "
        "profiled step's (torch's CPU allocator). The profiled parts are CPU time under torch.profiler, which "
        "inflates short calls; compare the rows of one cell, not across cells."
    ]
    return [ratios, parts], targets, notes, data
