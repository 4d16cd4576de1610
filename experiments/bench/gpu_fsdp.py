"""The GPU check's FSDP2 part: `configs/gpt/gpu.yaml`'s GPT trained a few steps on 2 GPUs (NCCL), sharded as a
`--trainer.strategy fsdp2` run shards it, in bf16 autocast; each rank's peak (`torch.cuda.max_memory_allocated`)
against the computed plan (`sharding_memory`), with and without activation checkpointing. A node with fewer than
2 GPUs skips it, saying so. Dry: 2 CPU processes (gloo) on a tiny GPT without checkpointing, the same code path."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch

from .gpu_parts import Skipped
from .sharding import SMOKE_SHAPE, Setup, run_setup
from .sharding_memory import GPU_CONFIG, Plan, count, memory, resolve

if TYPE_CHECKING:
    from .gpu_parts import Check

WORLD = 2
PRECISION = "bf16-mixed"  # gpu.yaml's


def fsdp_memory(check: Check) -> dict[str, Any]:
    """Per checkpointing setting: each rank's measured peak and the plan's figures, in bytes."""
    if check.dry:
        device, shape = "cpu", SMOKE_SHAPE
    else:
        gpus = torch.cuda.device_count()
        if gpus < WORLD:
            raise Skipped(f"needs a node with ≥ {WORLD} GPUs (FSDP2 over NCCL); this one has {gpus}")
        device, plan = "cuda", resolve(GPU_CONFIG)
        arch = {k: v for k, v in asdict(plan.arch).items() if v is not None}
        shape = {"arch": arch, "batch": plan.batch, "seq": plan.seq}
    from models import ArchConfig

    cfg = ArchConfig(**(shape["arch"] | {"max_seq_len": shape["seq"]}))
    plan = Plan(cfg, shape["batch"], shape["seq"], PRECISION)
    computed = memory(plan, WORLD, counts=count(cfg))
    out: dict[str, Any] = {"device": device, "world": WORLD, "precision": PRECISION, "params": count(cfg).total,
                           "batch": plan.batch, "seq": plan.seq, "settings": {}}  # fmt: skip
    for checkpointing in (False,) if check.dry else (False, True):  # dry: the code path once
        ranks = run_setup(Setup(WORLD, checkpointing=checkpointing), shape, 2 if check.dry else 3, device, PRECISION)
        out["settings"]["on" if checkpointing else "off"] = {
            "peak_bytes": [r["peak_bytes"] for r in ranks],
            "computed_at_backward": computed.at_backward(checkpointing),
            "computed_total": computed.total(checkpointing),
        }
    return out


def markdown(result: dict[str, Any]) -> list[str]:
    """The part's lines in `gpu_check.md`."""
    r = result
    header = (
        "| activation checkpointing | computed at the backward's start | computed total (bound) | "
        "measured peak per rank | measured ÷ computed at the backward's start |"
    )
    lines = [f"FSDP2 over {r['world']} {r['device']} processes, GPT of {r['params'] / 1e6:.1f}M parameters, "
             f"micro-batch {r['batch']} × {r['seq']} per device, `{r['precision']}`; MiB per device", "",
             header, "|---|---:|---:|---:|---:|"]  # fmt: skip
    for name, s in r["settings"].items():
        peaks = ", ".join(f"{p / 2**20:,.1f}" for p in s["peak_bytes"])
        ratio = max(s["peak_bytes"]) / s["computed_at_backward"]
        lines.append(f"| {name} | {s['computed_at_backward'] / 2**20:,.1f} | {s['computed_total'] / 2**20:,.1f} | "
                     f"{peaks} | {ratio:.2f} |")  # fmt: skip
    return lines
