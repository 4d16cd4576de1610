"""The parts of the one GPU check (`gpu_check.py` runs them): where and how big (`Check`), each family's `gpu.yaml`
workload, and one function per part, registered in `PARTS` in the order they run (the ladder last)."""

from __future__ import annotations

import contextlib
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import yaml
from torch import Tensor, nn

from models import GPT, ArchConfig, BertMLM, EncoderDecoder, ViT
from models.relative_bias import ScoreMask

from .common import POSITIONAL_SCHEMES, TrainStep
from .timing import interleaved, matmul_peak_flops

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "gpu"
FAMILIES = ("gpt", "bert", "translation", "vit")
# SDPA's implementations as torch.profiler names their aten ops (CPU and CUDA)
SDPA_OPS = {
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten::_scaled_dot_product_efficient_attention": "mem-efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cuDNN",
    "aten::_scaled_dot_product_attention_math": "math",
}


class Skipped(Exception):
    """A part that cannot run on this machine says why (the check records it as skipped, not failed)."""


@dataclass(frozen=True)
class Check:
    """Where and how big: the full check on CUDA in bf16, or the dry run on CPU with tiny shapes."""

    device: str
    dry: bool
    reps: int
    dtype: torch.dtype = torch.bfloat16
    bias_lengths: tuple[int, ...] = (1024, 4096)
    gen_tokens: int = 256
    ladder_steps: int = 300

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def peak_gib(self) -> float:
        return torch.cuda.max_memory_allocated() / 2**30 if self.device == "cuda" else float("nan")

    def reset_peak(self) -> None:
        if self.device == "cuda":
            torch.cuda.reset_peak_memory_stats()


FULL = Check(device="cuda", dry=False, reps=5)
DRY = Check(device="cpu", dry=True, reps=1, bias_lengths=(32, 64), gen_tokens=4, ladder_steps=2)
TINY = {"d_model": 32, "n_layers": 1, "n_heads": 2}  # a dry run's model, every family


def gpu_arch(family: str, dry: bool) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(arch, the model's other init args, the data's init args) of `configs/<family>/base.yaml` with its
    `gpu.yaml` over it: what `cli.py fit -c base.yaml -c gpu.yaml` trains."""
    model, data = {}, {}
    for name in ("base.yaml", "gpu.yaml"):
        config = yaml.safe_load((ROOT / "configs" / family / name).read_text())
        model_args = (config.get("model") or {}).get("init_args") or {}
        model |= {k: v for k, v in model_args.items() if k != "arch"} | {
            "arch": (model.get("arch") or {}) | (model_args.get("arch") or {})
        }
        data |= (config.get("data") or {}).get("init_args") or {}
    arch = model.pop("arch") | (TINY if dry else {})
    return arch, model, data


@dataclass
class Workload:
    """One family's model and a batch of its data, with the forward + loss a training step runs."""

    model: nn.Module
    inputs: Any
    targets: Tensor
    forward: Callable[[nn.Module, Any], Tensor]
    tokens: int  # tokens (or patches) per step, for throughput
    seq: int  # the attention length MFU's attention term uses


def workload(family: str, check: Check) -> Workload:
    """The `gpu.yaml` model of `family` on random data of its shapes (a few tokens when dry)."""
    arch, model_args, data = gpu_arch(family, check.dry)
    g = torch.Generator().manual_seed(0)
    batch = 2 if check.dry else int(data.get("batch_size", 8))
    if family == "vit":
        image, patch = (8, 4) if check.dry else (32, int(model_args.get("patch_size", 4)))
        model = ViT(ArchConfig(**(arch | {"vocab_size": 1})), image_size=image, patch_size=patch, num_classes=10)
        images = torch.randn(batch, 3, image, image, generator=g)
        labels = torch.randint(0, 10, (batch,), generator=g)
        seq = (image // patch) ** 2 + 1
        return Workload(model, images, labels, lambda m, x: m(x), batch * seq, seq)
    vocab = 64 if check.dry else int(data.get("bpe_vocab_size", 8192))
    seq = 16 if check.dry else int(data.get("seq_len", 128))
    cfg = ArchConfig(**(arch | {"vocab_size": vocab, "max_seq_len": seq}))
    ids = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    if family == "translation":
        src = torch.randint(0, vocab, (batch, seq), generator=g)
        return Workload(EncoderDecoder(cfg), (src, ids[:, :-1]), ids[:, 1:], lambda m, x: m(*x), 2 * batch * seq, seq)
    model = GPT(cfg) if family == "gpt" else BertMLM(cfg)
    return Workload(model, ids[:, :-1], ids[:, 1:], lambda m, x: m(x), batch * seq, seq)


def gpt_config(arch: dict[str, Any], seq: int, **overrides: Any) -> ArchConfig:
    """The `gpu.yaml` GPT's architecture at `seq` tokens, a 64-token vocabulary (attention is what is measured)."""
    return ArchConfig(**(arch | {"vocab_size": 64, "max_seq_len": seq} | overrides))


def loss_fn(output: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(output.flatten(0, -2).float(), targets.flatten())


def to_device(x: Any, device: str) -> Any:
    return tuple(t.to(device) for t in x) if isinstance(x, tuple) else x.to(device)


def throughput(check: Check) -> dict[str, Any]:
    """Each family's bf16 training step: tokens/s, MFU against the measured bf16 matmul peak, peak memory."""
    peak = matmul_peak_flops(256 if check.dry else 8192, tries=1 if check.dry else 3, dtype=check.dtype,
                             device=check.device)  # fmt: skip
    out = {"peak_flops": peak, "families": {}}
    for family in FAMILIES:
        w = workload(family, check)
        w.model.to(check.device)
        inputs, targets = to_device(w.inputs, check.device), w.targets.to(check.device)
        step = TrainStep(w.model, forward=w.forward, loss=loss_fn, autocast=(check.device, check.dtype),
                         sync=check.sync).on(inputs, targets)  # fmt: skip
        check.reset_peak()
        timing = interleaved({family: step}, check.reps, warmup=1)[family]
        flops = 3 * w.model.flops_per_token(w.seq) * w.tokens  # forward + backward ≈ 3 × forward
        out["families"][family] = {
            "params": sum(p.numel() for p in w.model.parameters()),
            "step_s": timing.median,
            "tokens_per_s": w.tokens / timing.median,
            "mfu": flops / timing.median / peak,
            "peak_gib": check.peak_gib(),
        }
        del w, step
    return out


def sdpa_kernels(check: Check) -> dict[str, Any]:
    """The SDPA implementation each positional scheme reaches in a bf16 training step of the GPT (the ops
    torch.profiler records), and whether the stack hands SDPA a T×T mask."""
    from torch.profiler import ProfilerActivity, profile

    arch, _, data = gpu_arch("gpt", check.dry)
    seq = 16 if check.dry else int(data["seq_len"])
    out = {}
    for scheme in POSITIONAL_SCHEMES:
        model = GPT(gpt_config(arch, seq, pos_encoding=scheme, dropout=0.0))
        model.to(check.device)
        ids = torch.randint(0, 64, (2, seq), device=check.device)
        with profile(activities=[ProfilerActivity.CPU]) as prof, torch.autocast(check.device, check.dtype):
            model(ids).float().sum().backward()
        ops = {SDPA_OPS[e.name] for e in prof.events() if e.name in SDPA_OPS}
        mask, _ = model.stack.self_mask(seq, 0, None, torch.zeros(1, seq, model.cfg.d_model, device=check.device))
        if isinstance(mask, ScoreMask):  # the suite's own path: no T×T mask reaches a kernel
            ops |= {"flex_attention (bias per distance)" if check.device == "cuda" else "blockwise bias (suite)"}
            shown = f"none: a {list(mask.bias.per_distance.shape)} bias per distance"
        else:
            shown = None if mask is None else list(mask.shape)
        out[scheme] = {"kernels": sorted(ops), "mask": shown}
    return out


def score_bias(check: Check) -> dict[str, Any]:
    """ALiBi's and T5's bias at long context: the suite's blockwise path (flex_attention on CUDA, the bias per
    distance, no T×T tensor) against the dense mask handed to SDPA, forward + backward of the GPT with the same
    weights: time, peak memory, and the largest gradient difference between the two (the CUDA backward of the
    flex path is tested nowhere else)."""
    arch, _, _ = gpu_arch("gpt", check.dry)
    out: dict[str, Any] = {}
    for scheme in ("alibi", "t5"):
        for seq in check.bias_lengths:
            row: dict[str, Any] = {}
            grads: dict[str, dict[str, Tensor]] = {}
            weights = None
            for path in ("blockwise", "math"):
                cfg = gpt_config(arch, seq, pos_encoding=scheme, dropout=0.0, bias_backward=path)
                model = GPT(cfg).to(check.device)
                weights = weights or {k: v.clone() for k, v in model.state_dict().items()}
                model.load_state_dict(weights)
                ids = torch.randint(0, 64, (1, seq), device=check.device, generator=torch.Generator().manual_seed(0)
                                    if check.device == "cpu" else None)  # fmt: skip

                def fwd_bwd(model=model, ids=ids) -> None:
                    model.zero_grad(set_to_none=True)
                    with torch.autocast(check.device, check.dtype):
                        model(ids).float().logsumexp(-1).mean().backward()
                    check.sync()

                check.reset_peak()
                try:
                    timing = interleaved({path: fwd_bwd}, check.reps, warmup=1)[path]
                    row[path] = {"s": timing.median, "peak_gib": check.peak_gib()}
                    grads[path] = {n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None}
                except torch.OutOfMemoryError as err:  # the dense mask may not fit: that is the finding
                    row[path] = {"error": f"out of memory: {str(err).splitlines()[0]}"}
                del model
            if len(grads) == 2:
                diffs = [(grads["blockwise"][n] - g).abs().max().item() for n, g in grads["math"].items()]
                row["max_grad_diff"] = max(diffs)
            out[f"{scheme} T={seq}"] = row
    return out


def kv_cache(check: Check) -> dict[str, Any]:
    """Greedy generation of the `gpu.yaml` GPT with and without the KV cache (same tokens), per scheme."""
    arch, _, _ = gpu_arch("gpt", check.dry)
    out = {}
    for scheme in ("rope", "alibi", "learned"):
        model = GPT(gpt_config(arch, check.gen_tokens + 8, pos_encoding=scheme)).to(check.device).eval()
        prompt = torch.randint(0, 64, (1, 8), device=check.device)
        runs = {}
        for cached in (True, False):
            with torch.no_grad(), torch.autocast(check.device, check.dtype):
                check.sync()
                start = time.perf_counter()
                tokens = model.generate(prompt, check.gen_tokens, temperature=0, use_cache=cached)
                check.sync()
            runs[cached] = (time.perf_counter() - start, tokens)
        out[scheme] = {"cached_s": runs[True][0], "uncached_s": runs[False][0],
                       "speedup": runs[False][0] / runs[True][0],
                       "same_tokens": bool(torch.equal(runs[True][1], runs[False][1]))}  # fmt: skip
    return out


def ladder(check: Check, out_dir: Path, seconds_left: float | None = None) -> dict[str, Any]:
    """A short GPT ladder (3 sizes × rope/alibi, one seed) through the sweep engine, so the ladder machinery has
    run once on this device: its results as data (each cell's loss and parameters per size, each size's ranking)
    and its report beside the check's files; the sweep folder is a temporary one (a device call brings back a few
    files, not a sweep). With `seconds_left`, an alarm stops it there (the check's budget)."""
    from experiments.analysis.sweep_report import build_report, ladder_results
    from experiments.sweep import run_sweep

    sizes = [(64, 2), (128, 4), (256, 8)] if not check.dry else [(16, 2), (24, 2), (32, 2)]
    spec = {
        "base": ["configs/gpt/base.yaml", "configs/gpt/tiny.yaml"],
        "fixed": {"trainer.max_steps": check.ladder_steps, "trainer.val_check_interval": check.ladder_steps,
                  "trainer.accelerator": "gpu" if check.device == "cuda" else "cpu",
                  "model.sample_tokens": 0, "data.val_tokens": 1024 if check.dry else 16384}
                 | ({"data.seq_len": 16, "model.arch.max_seq_len": 16, "data.eval_lengths": [16]} if check.dry else {}),
        "grid": {"model.arch.pos_encoding": ["rope"] if check.dry else ["rope", "alibi"]},
        "ladder": [{"name": f"d{d}", "model.arch.d_model": d, "model.arch.n_heads": h} for d, h in sizes],
        "seeds": [0],
        "checkpoint_every": check.ladder_steps,
    }  # fmt: skip
    kept = out_dir / f"{'gpu_check-dry' if check.dry else 'gpu_check'}-ladder.md"  # the sweep's whole report
    with tempfile.TemporaryDirectory(prefix="gpu_check-ladder-") as tmp, alarm(seconds_left):
        folder = Path(tmp)
        (folder / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        workers = {"threads": 1, "jobs": 2} if check.dry else {"threads": 8, "jobs": 1}
        outcome = run_sweep(folder / "spec.yaml", folder / "sweep", **workers)
        if outcome.failed or not outcome.finished:
            raise RuntimeError(f"the ladder sweep ended with runs {dict(outcome.runs)}")
        build_report(folder / "sweep")
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / "sweep" / "report.md", kept)
        table = ladder_results(folder / "sweep")[0]
    cells = {row.cell: {size: {"mean": r.mean, "params": r.params} for size, r in row.sizes.items()}
             for row in table.rows}  # fmt: skip
    rankings = {r.size: list(r.ranking) for r in table.rankings}
    return {"report": kept.name, "metric": table.metric, "sizes": list(table.sizes), "cells": cells,
            "rankings": rankings, "decision_accuracy": table.decision_accuracy}  # fmt: skip


@contextlib.contextmanager
def alarm(seconds: float | None):
    """Raises TimeoutError in this (main) thread after `seconds`; no limit with None."""
    if seconds is None:
        yield
        return

    def expire(signum, frame):
        raise TimeoutError(f"the GPU check's budget ended after {seconds:.0f} s left for this part")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(max(1, int(seconds)))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def fsdp(check: Check) -> dict[str, Any]:
    """FSDP2 on 2 GPUs: peak memory per device against the computed plan (`gpu_fsdp`; skipped on one GPU)."""
    from .gpu_fsdp import fsdp_memory  # it imports this module

    return fsdp_memory(check)


PARTS: dict[str, Callable[..., dict[str, Any]]] = {
    "throughput": throughput,
    "sdpa": sdpa_kernels,
    "score_bias": score_bias,
    "kv_cache": kv_cache,
    "fsdp": fsdp,
    "ladder": ladder,
}
