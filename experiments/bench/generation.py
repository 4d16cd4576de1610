"""Greedy generation with and without the KV cache, for every positional scheme.

Each (scheme, batch) pair runs `GPT.generate(..., temperature=0)` with `use_cache=True` and
`use_cache=False` on the same prompt, interleaved, and the two outputs of every repetition must
be identical token for token. A generation without the cache re-runs the whole sequence for each
new token (no two calls share a shape), so its warm-up is a short generation, not a full one.
"""

from __future__ import annotations

import time

import torch

from models import GPT

from .common import POSITIONAL_SCHEMES, Context
from .tables import Section, Table, Target
from .timing import Timing


def run(ctx: Context) -> Section:
    s = ctx.settings
    section = Section("generation", f"Generation: {s.gen_new_tokens} new tokens, greedy, KV cache vs none")
    new, prompt_len = s.gen_new_tokens, s.gen_prompt
    table = Table(
        ["scheme", "batch", "tokens/s with cache", "tokens/s without", "speed-up (paired min–max)", "identical tokens"],
        title=(
            f"prompt {prompt_len} tokens; max_seq_len {prompt_len + new}; tokens/s counts new tokens of the whole batch"
        ),
    )
    speedups: dict[int, dict[str, tuple]] = {b: {} for b in s.gen_batches}
    section.data["runs"] = {}
    for pos in POSITIONAL_SCHEMES:
        torch.manual_seed(0)
        model = GPT(s.arch(pos_encoding=pos, max_seq_len=prompt_len + new)).eval()
        for batch, reps in zip(s.gen_batches, s.gen_reps):
            prompt = torch.randint(0, s.vocab_size, (batch, prompt_len), generator=torch.Generator().manual_seed(1))
            modes = {"cache": True, "no cache": False}
            if batch > 1 and s.gen_uncached_schemes is not None and pos not in s.gen_uncached_schemes:
                modes = {"cache": True}
            for use_cache in modes.values():
                model.generate(prompt, min(4, new), temperature=0, use_cache=use_cache)  # warm-up
            times = {m: Timing() for m in modes}
            identical = True
            for r in range(reps):
                outs = {}
                for mode in list(modes) if r % 2 == 0 else list(modes)[::-1]:
                    t0 = time.perf_counter()
                    outs[mode] = model.generate(prompt, new, temperature=0, use_cache=modes[mode])
                    times[mode].samples.append(time.perf_counter() - t0)
                if "no cache" in outs:
                    identical &= torch.equal(outs["cache"], outs["no cache"])
            work = batch * new
            if "no cache" not in modes:
                table.add(pos, batch, times["cache"].rate(work).fmt(), "not run", "—", "—")
                section.data["runs"][f"{pos}/b{batch}"] = {"cache": times["cache"].to_json()}
                continue
            pairs = [u / c for c, u in zip(times["cache"].samples, times["no cache"].samples)]
            speedup = (times["no cache"].median / times["cache"].median, min(pairs), max(pairs))
            speedups[batch][pos] = speedup + (identical,)
            table.add(
                pos,
                batch,
                times["cache"].rate(work).fmt(),
                times["no cache"].rate(work).fmt(),
                f"{speedup[0]:.1f}× ({speedup[1]:.1f}–{speedup[2]:.1f}, n={reps})",
                "yes" if identical else "NO",
            )
            section.data["runs"][f"{pos}/b{batch}"] = {
                "cache": times["cache"].to_json(),
                "no_cache": times["no cache"].to_json(),
                "speedup": speedup,
                "identical": identical,
            }
    section.tables.append(table)

    if s.gen_uncached_schemes is not None:
        ran = ", ".join(s.gen_uncached_schemes) or "no scheme"
        section.notes.append(
            f"Without the cache, batches > 1 ran only for {ran} (`--gen-uncached-schemes`); "
            f"the batch-{max(s.gen_batches)} target covers only those."
        )
    thresholds = dict(zip(s.gen_batches, (3.0, 15.0)))
    for batch, threshold in thresholds.items():
        if not speedups[batch]:
            section.targets.append(Target(f"KV-cache speed-up at batch {batch}", None, threshold, detail="not run"))
            continue
        worst = min(speedups[batch], key=lambda p: speedups[batch][p][0])
        section.targets.append(
            Target(
                f"KV-cache speed-up at batch {batch} (worst scheme)",
                speedups[batch][worst][0],
                threshold,
                detail=f"{worst}; all: " + ", ".join(f"{p} {v[0]:.1f}×" for p, v in speedups[batch].items()),
            )
        )
    all_identical = all(v[3] for by_pos in speedups.values() for v in by_pos.values())
    section.targets.append(
        Target("greedy tokens identical with and without cache (1 = all)", float(all_identical), 1.0)
    )
    return section
