"""Data parallelism on this machine's cores: DDP with 2 processes × 1 thread (gloo, each process half of
the global batch, gradients all-reduced) against 1 process × 2 threads on the whole batch, in tokens/s
of the same global batch.

Each DDP repetition starts its processes afresh (`python -m experiments.bench.ddp --rank R ...`); a
process builds the benchmark GPT with the same seed, takes one untimed step, then times `k` steps
between two barriers and rank 0 prints the time. Start-up (importing torch, forming the group) is
not in the figures. Repetitions alternate which set-up runs first.

    python -m experiments.bench.ddp --rank 0 --world 2 --port 29511 --arch '{"d_model": 128, ...}' \
        --batch 32 --seq 128 --steps 5
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from .common import Context, worker_parser
from .tables import Section, Table
from .timing import Timing

ROOT = Path(__file__).resolve().parent.parent.parent


def _train(arch: dict, batch: int, seq: int, steps: int, rank: int, world: int) -> float:
    """Seconds for `steps` training steps of this process's share of the global batch."""
    import torch
    import torch.distributed as dist

    from models import GPT, ArchConfig

    from .common import TrainStep, token_batch

    torch.manual_seed(0)
    model = GPT(ArchConfig(**arch))
    ids, labels = token_batch(batch, seq, model.cfg.vocab_size)
    share = slice(rank * batch // world, (rank + 1) * batch // world)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    # plain fused AdamW, as in the sweeps section: the suite's parameter groups change weight decay, not cost
    step = TrainStep(model, optimizer=torch.optim.AdamW(model.parameters(), fused=True)).on(ids[share], labels[share])
    step()
    if world > 1:
        dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if world > 1:
        dist.barrier()
    return time.perf_counter() - start


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_seconds(arch: dict, batch: int, seq: int, steps: int, world: int) -> float:
    port = _free_port()
    env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    args = ["--world", str(world), "--port", str(port), "--arch", json.dumps(arch), "--batch", str(batch)]
    args += ["--seq", str(seq), "--steps", str(steps)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "experiments.bench.ddp", "--rank", str(rank), *args],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
        )
        for rank in range(world)
    ]  # fmt: skip
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a DDP benchmark process failed: exit codes {[p.returncode for p in procs]}")
    return json.loads(outputs[0].strip().splitlines()[-1])["seconds"]


def run(ctx: Context) -> Section:
    import torch

    s = ctx.settings
    section = Section("ddp", "DDP on CPU: 2 processes × 1 thread vs 1 process × 2 threads")
    arch = {k: v for k, v in asdict(s.arch()).items() if v is not None}
    world, steps, reps = 2, s.ddp_steps, s.ddp_reps
    tokens = steps * s.batch_size * s.seq_len
    samples: dict[str, list[float]] = {"1 process × 2 threads": [], "DDP 2 processes × 1 thread (gloo)": []}
    threads = torch.get_num_threads()
    try:
        for rep in range(reps):
            order = list(samples) if rep % 2 == 0 else list(reversed(samples))
            for name in order:
                if name.startswith("DDP"):
                    samples[name].append(_ddp_seconds(arch, s.batch_size, s.seq_len, steps, world))
                else:
                    torch.set_num_threads(world)
                    samples[name].append(_train(arch, s.batch_size, s.seq_len, steps, 0, 1))
    finally:
        torch.set_num_threads(threads)
    timings = {name: Timing(samples=times) for name, times in samples.items()}
    table = Table(
        ["set-up", "time per step", "tokens/s (global batch)"],
        title=f"GPT d_model {s.d_model}, {s.n_layers} layers, global batch {s.batch_size} × seq {s.seq_len}, "
        f"{steps} steps per repetition, {reps} repetitions",
    )
    for name, t in timings.items():
        table.add(name, f"{t.median / steps * 1e3:.4g} ms", f"{tokens / t.median:.4g}")
    section.tables.append(table)
    single, ddp = (timings[name].median for name in samples)
    section.notes.append(
        f"DDP with one single-thread process per core gives {single / ddp:.2f}× the throughput of one process "
        "using both cores; each DDP step also all-reduces the gradients over gloo."
    )
    section.data = {name: t.to_json() for name, t in timings.items()} | {"ddp_speedup": single / ddp}
    return section


def main() -> None:
    parser = worker_parser()
    args = parser.parse_args()
    import torch.distributed as dist

    os.environ |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(args.port)}
    dist.init_process_group("gloo", rank=args.rank, world_size=args.world)
    try:
        seconds = _train(args.arch, args.batch, args.seq, args.steps, args.rank, args.world)
    finally:
        dist.destroy_process_group()
    if args.rank == 0:
        print(json.dumps({"seconds": seconds}), flush=True)


if __name__ == "__main__":
    main()
