"""Activation checkpointing (`ArchConfig.activation_checkpointing`): peak memory and time of a GPT
training step with and without it, at several depths (the training section's other dimensions).

Memory is measured as in the seqlen section: bytes live in torch's CPU allocator during one step
above those live when it began, from torch.profiler's memory events (profile_memory=True). That
is activations, gradients and temporaries, not the parameters and optimiser state that already
existed. `tracemalloc` would not do: it sees Python's allocator only, not torch's. Allocations made
outside torch's allocator (oneDNN/MKL scratch) are not seen either.
"""

from __future__ import annotations

import torch

from models import GPT

from .common import Context, TrainStep, profile_step, token_batch
from .tables import Section, Table
from .timing import interleaved, ratio_range

MODES = {"plain": False, "checkpointed": True}


def run(ctx: Context) -> Section:
    s = ctx.settings
    section = Section("checkpointing", "Activation checkpointing: peak memory and time of a training step")
    ids, labels = token_batch(s.batch_size, s.seq_len, s.vocab_size)
    results: dict[int, dict] = {}
    for depth in s.ckpt_depths:
        steps, first_loss = {}, {}
        for mode, flag in MODES.items():
            torch.manual_seed(0)  # the same weights in both modes
            step = TrainStep(GPT(s.arch(n_layers=depth, activation_checkpointing=flag)))
            first_loss[mode] = step(ids, labels)  # also creates the optimiser state before the profiled step
            steps[mode] = step.on(ids, labels)
        peaks = {mode: profile_step(step)[0] for mode, step in steps.items()}
        times = interleaved(steps, s.reps, s.warmup)
        results[depth] = {
            "peak_bytes": peaks,
            "timing": times,
            "time_ratio": ratio_range(times["checkpointed"], times["plain"]),
            "same_first_loss": bool(torch.equal(first_loss["plain"], first_loss["checkpointed"])),
        }

    table = Table(
        [
            "layers",
            "peak MiB, plain",
            "peak MiB, checkpointed",
            "memory checkpointed ÷ plain",
            "step time, plain",
            "step time, checkpointed",
            "time checkpointed ÷ plain (paired range)",
        ],
        title=f"GPT d_model {s.d_model}, {s.n_heads} heads, seq {s.seq_len}, batch {s.batch_size}, vocab "
        f"{s.vocab_size}; peak memory of a step above its start (torch CPU allocator, via torch.profiler)",
    )
    for depth, r in results.items():
        mib = {mode: r["peak_bytes"][mode] / 2**20 for mode in MODES}
        ratio = r["time_ratio"]
        table.add(
            depth,
            f"{mib['plain']:.1f}",
            f"{mib['checkpointed']:.1f}",
            f"{mib['checkpointed'] / mib['plain']:.3f}",
            r["timing"]["plain"].fmt("ms"),
            r["timing"]["checkpointed"].fmt("ms"),
            f"{ratio[0]:.3f} ({ratio[1]:.2f}–{ratio[2]:.2f})",
        )
    section.tables.append(table)

    depths = list(results)
    if len(depths) > 1:  # memory each added layer costs: the slope between the shallowest and deepest
        lo, hi = depths[0], depths[-1]
        slope = {
            mode: (results[hi]["peak_bytes"][mode] - results[lo]["peak_bytes"][mode]) / (hi - lo) / 2**20
            for mode in MODES
        }
        section.notes.append(
            f"Peak memory per added layer ({lo} → {hi} layers): {slope['plain']:.2f} MiB plain, "
            f"{slope['checkpointed']:.2f} MiB checkpointed (a checkpointed block keeps only its input, "
            f"batch × seq × d_model fp32 = {s.batch_size * s.seq_len * s.d_model * 4 / 2**20:.2f} MiB)."
        )
        section.data["mib_per_layer"] = slope
    same = all(r["same_first_loss"] for r in results.values())
    section.notes.append(
        f"First-step losses of the two modes (same weights, same batch) are {'identical' if same else 'DIFFERENT'} "
        "at every depth; tests/models/test_activation_checkpointing.py checks that the gradients are too."
    )
    section.notes.append(
        "Checkpointing recomputes each block's forward during the backward: about one more forward per step, "
        "so the time ratio is expected near 4/3 where the backward costs twice the forward."
    )
    section.data["depths"] = {
        str(depth): {
            "peak_bytes": r["peak_bytes"],
            "timing": {mode: t.to_json() for mode, t in r["timing"].items()},
            "time_ratio": r["time_ratio"],
            "same_first_loss": r["same_first_loss"],
        }
        for depth, r in results.items()
    }
    return section
