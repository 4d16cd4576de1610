"""Sequence-length scaling of a training step per positional scheme, at a fixed number of tokens
per batch: time, peak memory, whether a T×T tensor is built and which SDPA kernel runs.

Memory is what torch's CPU allocator reports through `torch.profiler` (profile_memory=True): the
highest level of bytes live during one training step above the level when the step began, i.e.
activations, gradients, temporaries and any T×T mask, but not the parameters and optimiser state
that already existed. Allocations made outside torch's allocator (oneDNN/MKL scratch buffers)
are not seen. The same profiled step gives the names of the SDPA kernels that ran.
"""

from __future__ import annotations

import torch

from models import GPT

from .common import POSITIONAL_SCHEMES, Context, TrainStep, profile_step, token_batch
from .seqlen_bias import bias_grid
from .tables import Section, Table, Target
from .timing import interleaved
from .training import sdpa_mask_of

FUSED_SCHEMES = ("rope", "sinusoidal", "learned", "none")  # the "no T×T tensor" schemes


def run(ctx: Context) -> Section:
    s = ctx.settings
    section = Section("seqlen", "Sequence-length scaling (training step, fixed tokens per batch)")
    lengths = [T for T in s.seq_lengths if T <= s.seq_tokens]
    models, train_steps = {}, {}
    for pos in POSITIONAL_SCHEMES:
        torch.manual_seed(0)
        models[pos] = GPT(s.arch(pos_encoding=pos, max_seq_len=max(lengths)))
        train_steps[pos] = TrainStep(models[pos])
        train_steps[pos](*token_batch(1, lengths[0], s.vocab_size))
    # each scheme keeps one optimiser, whose state now exists: the first step at a new length is
    # profiled (it is also that length's warm-up), then the length's timed repetitions follow.
    # A one-sequence forward first fills the caches a scheme keeps per length, so the profiled step
    # shows steady-state memory.
    results: dict[str, dict[int, dict]] = {pos: {} for pos in POSITIONAL_SCHEMES}
    for T in lengths:
        ids, labels = token_batch(s.seq_tokens // T, T, s.vocab_size)
        steps = {pos: train_steps[pos].on(ids, labels) for pos in models}
        for pos, step in steps.items():
            with torch.no_grad():
                models[pos](ids[:1])  # builds a scheme's per-length caches (ALiBi distances, T5 buckets)
            peak, kernels = profile_step(step)
            results[pos][T] = {"peak_bytes": peak, "kernels": sorted(kernels), "mask": sdpa_mask_of(models[pos], T)}
        for pos, t in interleaved(steps, s.seq_reps, warmup=0).items():
            results[pos][T]["timing"] = t
    section.data = {
        "tokens_per_batch": s.seq_tokens,
        "lengths": lengths,
        "schemes": {
            pos: {str(T): r | {"timing": r["timing"].to_json()} for T, r in by_len.items()}
            for pos, by_len in results.items()
        },
    }

    head = ["scheme"] + [f"T={T}" for T in lengths]
    time_table = Table(
        head,
        title=f"Step time, median ms (n={s.seq_reps}), {s.seq_tokens} tokens per batch (batch = {s.seq_tokens}/T)",
    )
    mem_table = Table(
        head, title="Peak memory of a step above its start, MiB (torch CPU allocator, via torch.profiler)"
    )
    kernel_table = Table(
        ["scheme", "SDPA kernel(s) seen", f"mask given to SDPA at T={lengths[-1]}"], title="Attention path"
    )
    for pos, by_len in results.items():
        time_table.add(pos, *[f"{by_len[T]['timing'].median * 1e3:.4g}" for T in lengths])
        mem_table.add(pos, *[f"{by_len[T]['peak_bytes'] / 2**20:.1f}" for T in lengths])
        kernels = sorted(set().union(*(by_len[T]["kernels"] for T in lengths)))
        kernel_table.add(pos, ", ".join(kernels) or "?", by_len[lengths[-1]]["mask"])
    section.tables += [time_table, mem_table, kernel_table]

    short, long = (64, 1024) if {64, 1024} <= set(lengths) else (lengths[0], lengths[-1])
    for pos in FUSED_SCHEMES:
        by_len = results[pos]
        masks = [T for T in lengths if not by_len[T]["mask"].startswith("None")]
        math = [T for T in lengths if any(k.startswith("math") for k in by_len[T]["kernels"])]
        tt = bool(masks or math)
        section.targets.append(
            Target(
                f"{pos}: no T×T tensor (1 = none built)",
                0.0 if tt else 1.0,
                1.0,
                detail=f"mask at T={masks}, math kernel at T={math}" if tt else "mask None and flash kernel at every T",
            )
        )
        ratio = by_len[long]["timing"].median / by_len[short]["timing"].median
        section.targets.append(Target(f"{pos}: step time T={long} ÷ T={short}", ratio, 2.0, higher_is_better=False))
    # the score bias without a T×T tensor (models/relative_bias.py, models/far_bias.py), at the lengths where
    # attention dominates the step (the training section's T = 128 hides it behind the weights' cost)
    tables, targets, notes, section.data["bias"] = bias_grid(s)
    section.tables += tables
    section.targets += targets
    section.notes += notes
    math_schemes = [
        p for p in POSITIONAL_SCHEMES if any("math" in k for r in results[p].values() for k in r["kernels"])
    ]
    if math_schemes:
        section.notes.append(
            f"{', '.join(math_schemes)}: SDPA ran its math kernel, which materialises (B, H, T, T) scores. SDPA's CPU "
            "flash kernel computes no gradient for attn_mask, so a mask that requires grad (T5's learned bias) "
            "falls back to math in training; a mask that does not (ALiBi's fixed slopes) keeps the flash kernel."
        )
    if models["t5"].cfg.bias_backward == "blockwise":
        section.notes.append(
            "t5 over causal rows (GPT): every distance past its last bucket's first (113) has one bias per head, so "
            "those keys go through SDPA's fused causal kernel with no mask, and only a band of 113 distances gets "
            "the bucketed bias, 32 queries at a time; the two are merged by log-sum-exp, forward and backward "
            "(`models/far_bias.py`). t5 with padding (BERT, the encoder) or a KV cache, and alibi with either: the "
            "bias stays per distance, (H, 2T − 1) numbers, applied one block of 128 queries at a time, forward "
            "and backward (`models/relative_bias.py`). No (B, H, T, T) tensor is built; `bias_backward: math` is "
            "the dense mask. alibi over causal rows is m·j once each row's constant is dropped: one more feature "
            "of q and k (head dim 33 here), and SDPA's causal kernel does the rest."
        )
    section.notes.append(
        "Memory: bytes live in torch's CPU allocator during one step above those live when it began "
        "(activations, gradients, temporaries, masks; not parameters or optimiser state), from torch.profiler "
        "memory events; oneDNN/MKL scratch outside the allocator is not seen."
    )
    return section
