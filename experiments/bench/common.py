"""Shapes and repetition counts of a benchmark run, and the training step every section times."""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.profiler import ProfilerActivity, profile

from models import ArchConfig
from models.config import PosEncoding

if TYPE_CHECKING:
    from lit_modules.optim import OptimConfig

# every `PosEncoding` choice, the baseline `none` first (the row order of the bench tables)
POSITIONAL_SCHEMES = ("none",) + tuple(p for p in get_args(PosEncoding) if p != "none")
# SDPA's CPU implementations as torch.profiler names them
KERNELS = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten::_scaled_dot_product_attention_math": "math (materialises T×T scores)",
    "aten::_scaled_dot_product_efficient_attention": "mem-efficient",
}


@dataclass(frozen=True)
class Settings:
    """Everything a run's size depends on. `FULL` holds the issue's shapes; `SMOKE` is tiny and
    runs each measurement once (it checks that every section runs, not how fast)."""

    smoke: bool = False
    reps: int = 7  # interleaved repetitions of a timed comparison
    warmup: int = 1  # untimed calls per candidate before its repetitions
    # matmul peak (MFU's denominator)
    peak_size: int = 2048
    peak_tries: int = 5
    # the GPT of the training, Lightning, sweep and data sections
    vocab_size: int = 65
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    seq_len: int = 128
    batch_size: int = 32
    compile: bool = False  # time torch.compile (cold compile and steady state); never in smoke
    # Lightning overhead: `lightning_reps` chunks of `lightning_chunk` steps each
    lightning_chunk: int = 10
    lightning_reps: int = 7
    # training diagnostics: probed every `diag_period` steps, `diag_reps` probed steps timed
    diag_period: int = 4
    diag_reps: int = 9
    # sequence-length scaling at a fixed number of tokens per batch
    seq_lengths: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048)
    seq_tokens: int = 4096
    seq_reps: int = 5
    # the score-bias schemes ÷ none (`seqlen_bias`): lengths × heads × threads, the issue's targets' grid
    seq_bias_lengths: tuple[int, ...] = (1024, 2048)
    seq_bias_heads: tuple[int, ...] = (4, 8)
    seq_bias_threads: tuple[int, ...] = (1, 2)
    # generation: new tokens after a prompt, per batch size; repetitions per batch size
    gen_new_tokens: int = 256
    gen_prompt: int = 8
    gen_batches: tuple[int, ...] = (1, 32)
    gen_reps: tuple[int, ...] = (3, 1)
    # schemes whose generation without the cache also runs at batch > 1 (each ~20–60 s on 2 cores);
    # None: all. Batch 1 runs both ways for every scheme.
    gen_uncached_schemes: tuple[str, ...] | None = None
    # ViT
    vit_image: int = 32
    vit_patch: int = 4
    vit_d_model: int = 192
    vit_depth: int = 6
    vit_heads: int = 3
    vit_classes: int = 10
    vit_batch: int = 64
    # sweeps: training steps each worker process times
    sweep_steps: int = 2
    # DDP on CPU: timed steps per repetition, repetitions
    ddp_steps: int = 5
    ddp_reps: int = 3
    # data loading: steps timed
    data_steps: int = 20
    # the token store: corpus MB (and how many times larger the second), loader batches timed, run steps and runs
    store_mb: float = 8.0
    store_scale: int = 10
    loader_batches: int = 30
    rss_steps: int = 40
    rss_reps: int = 2
    # activation checkpointing: depths of the GPT (the training section's other dimensions)
    ckpt_depths: tuple[int, ...] = (2, 4, 8)
    # decoding speed of the encoder-decoder: (encoder, decoder) depths at equal total depth, the
    # first the baseline; batch of sources, source length, tokens decoded, beam width, repetitions
    # (capped by --reps)
    dec_splits: tuple[tuple[int, int], ...] = ((6, 6), (10, 2), (11, 1))
    dec_vocab_size: int = 1000
    dec_batch: int = 16
    dec_src_len: int = 32
    dec_new_tokens: int = 32
    dec_beam: int = 4
    dec_reps: int = 3
    # coordinate check (`coord_data`): the families; widths at `coord_depth` blocks (sp, mup), depths at width
    # `coord_depth_width` (mup, completep); Adam steps at one fixed lr, seeds averaged; the slope tolerance
    coord_families: tuple[str, ...] = ("gpt", "bert", "translation", "vit")
    coord_widths: tuple[int, ...] = (64, 128, 256, 512, 1024)
    coord_depth: int = 2
    coord_depths: tuple[int, ...] = (2, 4, 8, 16)
    coord_depth_width: int = 128
    coord_steps: int = 5
    coord_seeds: int = 5
    coord_lr: float = 3e-3
    coord_seq_len: int = 32
    coord_batch: int = 8
    coord_heads: int = 4
    coord_tolerance: float = 0.3

    def arch(self, **overrides) -> ArchConfig:
        fields = {
            "vocab_size": self.vocab_size,
            "d_model": self.d_model,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "max_seq_len": self.seq_len,
        }
        return ArchConfig(**(fields | overrides))


FULL = Settings()
SMOKE = replace(
    FULL,
    smoke=True,
    reps=1,
    warmup=1,
    peak_size=256,
    peak_tries=1,
    d_model=32,
    n_layers=1,
    n_heads=2,
    seq_len=16,
    batch_size=4,
    lightning_chunk=2,
    lightning_reps=1,
    diag_period=2,
    diag_reps=2,
    seq_lengths=(8, 16, 32),
    seq_tokens=64,
    seq_reps=1,
    seq_bias_lengths=(16, 32),
    seq_bias_heads=(2,),
    seq_bias_threads=(1,),
    gen_new_tokens=6,
    gen_prompt=2,
    gen_batches=(1, 4),
    gen_reps=(1, 1),
    vit_image=8,
    vit_patch=4,
    vit_d_model=32,
    vit_depth=1,
    vit_heads=2,
    vit_batch=4,
    sweep_steps=1,
    ddp_steps=1,
    ddp_reps=1,
    data_steps=2,
    store_mb=0.05,
    store_scale=2,
    loader_batches=2,
    rss_steps=2,
    rss_reps=1,
    ckpt_depths=(1, 2),
    dec_splits=((2, 2), (3, 1)),
    dec_vocab_size=64,
    dec_batch=2,
    dec_src_len=4,
    dec_new_tokens=3,
    dec_beam=2,
    dec_reps=1,
    coord_widths=(16, 32),
    coord_depths=(2, 3),
    coord_depth_width=16,
    coord_steps=1,
    coord_seeds=1,
    coord_seq_len=8,
    coord_batch=2,
    coord_heads=2,
)


def worker_parser() -> argparse.ArgumentParser:
    """The command line of one rank of a multi-process measurement (the DDP and sharding sections' workers): its
    rank, the world, the rendezvous port, the batch and sequence per process, the steps, and the model as JSON."""
    parser = argparse.ArgumentParser()
    for name in ("rank", "world", "port", "batch", "seq", "steps"):
        parser.add_argument(f"--{name}", type=int, required=True)
    parser.add_argument("--arch", type=json.loads, required=True)
    return parser


def token_batch(batch: int, seq: int, vocab: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Random (input_ids, labels), each (batch, seq)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def cross_entropy(output: Tensor, targets: Tensor) -> Tensor:
    """Cross entropy of (..., classes) outputs against (...) targets: next-token logits (B, T, V)
    against labels (B, T), or class logits (B, C) against labels (B,)."""
    return F.cross_entropy(output.flatten(0, -2), targets.flatten())


class TrainStep:
    """The training step every benchmark times: forward, loss, backward, [gradient clipping,]
    optimiser step, zero_grad(set_to_none=True)[, scheduler step].

    The optimiser is the suite's (`lit_modules.optim.build_optimizer`: fused AdamW, weight decay on
    matrices only, warmup-cosine schedule) built from `optim` (default `OptimConfig()`), so every
    candidate pays the same optimiser step. `optimizer` replaces it where building it is not wanted
    (see `sweeps.worker`); the schedule is stepped only with `step_schedule`.

    `step(inputs, targets)` runs one step on a batch and returns the detached loss;
    `step.on(inputs, targets)` is a no-argument closure on a fixed batch (what `interleaved` times).

    Args:
        forward: `forward(model, inputs)` returns the output (default `model(inputs)`).
        loss: `loss(output, targets)` (default `cross_entropy`).
        clip_norm: clip the gradient norm to this before the optimiser step.
        autocast: (device_type, dtype) to run forward and loss under `torch.autocast`.
        sync: called at the end of every step (e.g. `torch.cuda.synchronize`).
    """

    def __init__(
        self,
        model: nn.Module,
        optim: OptimConfig | None = None,
        *,
        total_steps: int = 1,
        step_schedule: bool = False,
        optimizer: torch.optim.Optimizer | None = None,
        forward: Callable[[nn.Module, Tensor], Tensor] | None = None,
        loss: Callable[[Tensor, Tensor], Tensor] = cross_entropy,
        clip_norm: float | None = None,
        autocast: tuple[str, torch.dtype] | None = None,
        sync: Callable[[], object] | None = None,
    ):
        self.model = model.train()
        self.schedule = None
        if optimizer is None:
            from lit_modules.optim import OptimConfig, build_optimizer  # imports Lightning: not at module level

            optimizer, schedule = build_optimizer(model, optim or OptimConfig(), total_steps)
            self.schedule = schedule if step_schedule else None
        elif optim is not None or step_schedule:
            raise ValueError("TrainStep: pass either `optimizer` or `optim`/`step_schedule`, not both")
        self.optimizer = optimizer
        self.forward = forward
        self.loss = loss
        self.clip_norm = clip_norm
        self.autocast = autocast
        self.sync = sync

    def __call__(self, inputs, targets) -> Tensor:
        model = self.model
        with torch.autocast(*self.autocast) if self.autocast else contextlib.nullcontext():
            output = self.forward(model, inputs) if self.forward is not None else model(inputs)
            loss = self.loss(output, targets)
        loss.backward()
        if self.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), self.clip_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.schedule is not None:
            self.schedule.step()
        if self.sync is not None:
            self.sync()
        return loss.detach()

    def on(self, inputs, targets) -> Callable[[], Tensor]:
        """One step on this fixed batch per call."""
        return functools.partial(self, inputs, targets)


@dataclass
class Context:
    """What every section receives: the run's settings and the matmul peak measured at start."""

    settings: Settings
    peak_flops: float  # fp32 FLOP/s of a large square matmul, best of several
    out: Path | None = None  # the results folder (`--out`), where a section writes its figures; None: none


def profile_step(step) -> tuple[int, set[str]]:
    """(peak bytes above the starting level, SDPA kernels) of one call of `step`."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = prof.profiler.kineto_results.events()
    memory = sorted((e for e in events if e.name() == "[memory]"), key=lambda e: e.start_ns())
    live = itertools.accumulate((e.nbytes() for e in memory), initial=0)
    kernels = {KERNELS[e.name()] for e in events if e.name() in KERNELS}
    return max(live), kernels
