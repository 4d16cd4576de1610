"""torch.compile per family: cold compile time, steady-state step time, and the break-even step count
after which a run that compiles has caught up with one that does not.

break-even = cold compile ÷ (eager step − compiled step): a run of more steps gains from
`--model.compile true`, a shorter one loses. The break-even is reported, not acted on: it depends on
the model's size, the machine and its load, and compile's cold cost is paid again by every process
(each sweep run, each DDP rank) and at every new input shape (each evaluation length), which a
per-run automatic switch could not see. Measured only with `cli.py bench --compile` (never in smoke
mode: a cold compile takes tens of seconds).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

import torch
from torch import Tensor, nn

from models import GPT, ArchConfig, BertMLM, EncoderDecoder, ViT

from .common import Context, TrainStep, cross_entropy, token_batch
from .tables import Section, Table
from .timing import interleaved, ratio_range, time_call


def _families(s) -> dict[str, tuple[nn.Module, Callable, Tensor, Tensor]]:
    """Each family at the training section's sizes: (model, forward, inputs, targets)."""
    arch = s.arch()
    ids, labels = token_batch(s.batch_size, s.seq_len, s.vocab_size)
    images = torch.randn(s.batch_size, 3, s.vit_image, s.vit_image, generator=torch.Generator().manual_seed(0))
    vit_arch = ArchConfig(
        d_model=arch.d_model, n_layers=arch.n_layers, n_heads=arch.n_heads, pos_encoding="learned", max_seq_len=None
    )
    torch.manual_seed(0)
    return {
        "gpt": (GPT(arch), None, ids, labels),
        "bert": (BertMLM(arch), None, ids, labels),
        # teacher forcing: source = the tokens, target input = the tokens, labels = the next tokens
        "translation": (EncoderDecoder(arch), lambda m, x: m(x, x), ids, labels),
        "vit": (
            ViT(vit_arch, image_size=s.vit_image, patch_size=s.vit_patch, num_classes=s.vit_classes),
            None,
            images,
            labels[:, 0] % s.vit_classes,
        ),
    }


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _measure(model: nn.Module, forward, inputs: Tensor, targets: Tensor, s) -> dict:
    eager = TrainStep(copy.deepcopy(model), forward=forward, loss=cross_entropy).on(inputs, targets)
    compiled = TrainStep(torch.compile(copy.deepcopy(model)), forward=forward, loss=cross_entropy).on(inputs, targets)
    eager()
    eager_step = time_call(eager)
    cold = _seconds(compiled) - eager_step  # forward and backward graphs compile in the first call
    t = interleaved({"eager": eager, "compiled": compiled}, s.reps, s.warmup)
    saved = t["eager"].median - t["compiled"].median
    return {
        "cold_compile_s": cold,
        "eager": t["eager"],
        "compiled": t["compiled"],
        "speedup": ratio_range(t["eager"], t["compiled"]),
        "break_even_steps": cold / saved if saved > 0 else None,
    }


def run(ctx: Context) -> Section:
    s = ctx.settings
    section = Section("compile", "torch.compile per family: cold compile, step time, break-even")
    if not s.compile:
        section.notes.append("torch.compile per family not measured (pass `--compile`; never in smoke mode).")
        return section
    results = {}
    for name, (model, forward, inputs, targets) in _families(s).items():
        torch._dynamo.reset()  # each family compiles cold, as in a fresh run
        results[name] = _measure(model, forward, inputs, targets, s)
    table = Table(
        ["family", "cold compile", "eager step", "compiled step", "speed-up (paired range)", "break-even steps"],
        title=f"d_model {s.d_model}, {s.n_layers} layers, {s.n_heads} heads, seq {s.seq_len}, batch {s.batch_size} "
        f"(ViT: {s.vit_image}px images, patch {s.vit_patch}); default torch.compile mode",
    )
    for name, r in results.items():
        ratio = r["speedup"]
        table.add(
            name,
            f"{r['cold_compile_s']:.1f} s",
            r["eager"].fmt("ms"),
            r["compiled"].fmt("ms"),
            f"{ratio[0]:.3f} ({ratio[1]:.2f}–{ratio[2]:.2f})",
            f"{r['break_even_steps']:.0f}" if r["break_even_steps"] is not None else "never (no gain)",
        )
    section.tables.append(table)
    section.notes.append(
        "A run pays the cold compile once per process and per new input shape: a sweep run of N steps gains "
        "from `--model.compile true` when N exceeds the break-even (plus one recompile per evaluation length)."
    )
    section.data = {
        name: r | {"eager": r["eager"].to_json(), "compiled": r["compiled"].to_json()} for name, r in results.items()
    }
    return section
