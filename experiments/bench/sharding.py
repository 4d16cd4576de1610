"""Memory per device under FSDP2 (`--trainer.strategy fsdp2`): the computed plan (`sharding_memory`) for the GPU
configs, and the peak measured on CPU processes (gloo) against the plan for the same small GPT.

A measured process (`python -m experiments.bench.sharding --rank R --world N ...`, one thread) builds the GPT with
the same seed, shards it as `lit_modules.sharding.shard` does for a run (each `Block` a unit, then the root) or
leaves it whole (`--plain`), and trains `steps` steps on its own micro-batch with the suite's AdamW. Its peak is
the bytes live in torch's CPU allocator: those of the model's own tensors when training starts (its local shards
and buffers, counted) plus the highest level above them during the steps (torch.profiler's memory events, as in
the checkpointing section). The first step creates the AdamW states, so the later steps' peak holds them.
What this leaves out: allocations outside torch's allocator (oneDNN scratch, gloo's own buffers, Python objects)
and the model's construction, where each process briefly holds the whole model before sharding.

    python -m experiments.bench.sharding --rank 0 --world 2 --port 29512 --arch '{"d_model": 256, ...}' \
        --batch 8 --seq 128 --steps 3
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from .common import Context, worker_parser
from .ddp import _free_port
from .sharding_memory import README_PLANS, Plan, count, memory, planning_table
from .tables import Section, Table

ROOT = Path(__file__).resolve().parent.parent.parent
MIB = 2**20


@dataclass(frozen=True)
class Setup:
    """One measured row: `world` processes, sharded or one plain process, with or without checkpointing."""

    world: int
    fsdp: bool = True
    checkpointing: bool = False

    @property
    def name(self) -> str:
        kind = f"FSDP2 × {self.world}" if self.fsdp else "plain (no sharding) × 1"
        return kind + (", checkpointed" if self.checkpointing else "")


FULL_SETUPS = (Setup(1, fsdp=False), Setup(1), Setup(2), Setup(4), Setup(2, checkpointing=True))
SMOKE_SETUPS = (Setup(1, fsdp=False), Setup(2))
# the measured GPT: big enough that states, activations and logits each weigh, small enough for 2 cores
FULL_SHAPE = {"arch": {"vocab_size": 8192, "d_model": 256, "n_layers": 4, "n_heads": 4}, "batch": 8, "seq": 128}
SMOKE_SHAPE = {"arch": {"vocab_size": 64, "d_model": 32, "n_layers": 1, "n_heads": 2}, "batch": 2, "seq": 16}


def _measure(arch: dict, batch: int, seq: int, steps: int, rank: int, world: int, fsdp: bool, device: str = "cpu",
             precision: str = "32-true") -> dict:  # fmt: skip
    """This process's peak bytes over `steps` training steps (the module docstring says what is counted; on CUDA,
    `torch.cuda.max_memory_allocated` after the model is sharded)."""
    import contextlib

    import torch

    from lit_modules.optim import OptimConfig, build_optimizer
    from models import GPT, ArchConfig

    from .common import cross_entropy, profile_step, token_batch

    cuda = device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    torch.manual_seed(0)
    model = GPT(ArchConfig(**arch)).to(device)
    if fsdp:
        from torch.distributed.device_mesh import init_device_mesh

        from lit_modules.sharding import shard

        shard(model, init_device_mesh(device, (world,)))
    ids, labels = (t.to(device) for t in token_batch(batch, seq, model.cfg.vocab_size, seed=rank))
    tensors = [getattr(p, "_local_tensor", p) for p in model.parameters()] + list(model.buffers())
    start = sum(t.untyped_storage().nbytes() for t in tensors)  # the shards (padded) and buffers, once each
    optimizer, _ = build_optimizer(model, OptimConfig(), steps, precision)
    mixed = precision.endswith("-mixed")
    autocast = torch.autocast(device, torch.bfloat16 if precision.startswith("bf16") else torch.float16)

    def step() -> None:  # as a Lightning step: the loss alone leaves the forward, so the logits are freed
        with autocast if mixed else contextlib.nullcontext():
            loss = cross_entropy(model(ids), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if not cuda:
        above, _ = profile_step(lambda: [step() for _ in range(steps)])
        return {"rank": rank, "start_bytes": start, "peak_bytes": start + above}
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    allocated = torch.cuda.memory_allocated()  # the model's tensors and whatever sharding left
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return {"rank": rank, "start_bytes": start, "allocated_at_start": allocated,
            "peak_bytes": torch.cuda.max_memory_allocated()}  # fmt: skip


def run_setup(setup: Setup, shape: dict, steps: int, device: str = "cpu", precision: str = "32-true") -> list[dict]:
    """Every rank's measurement of `setup`, each rank its own fresh process (one thread on CPU)."""
    arch = shape["arch"] | {"max_seq_len": shape["seq"], "activation_checkpointing": setup.checkpointing}
    env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    args = ["--world", str(setup.world), "--port", str(_free_port()), "--arch", json.dumps(arch)]
    args += ["--batch", str(shape["batch"]), "--seq", str(shape["seq"]), "--steps", str(steps)]
    args += ["--device", device, "--precision", precision] + ([] if setup.fsdp else ["--plain"])
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "experiments.bench.sharding", "--rank", str(rank), *args],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
        )
        for rank in range(setup.world)
    ]  # fmt: skip
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a sharding benchmark process failed: exit codes {[p.returncode for p in procs]}")
    return [json.loads(out.strip().splitlines()[-1]) for out in outputs]


def measured_table(shape: dict, setups: tuple[Setup, ...], steps: int) -> tuple[Table, dict]:
    """The measured peaks of `setups` against the plan of the same GPT (fp32 on CPU)."""
    from models import ArchConfig

    cfg = ArchConfig(**(shape["arch"] | {"max_seq_len": shape["seq"]}))
    plan = Plan(cfg, shape["batch"], shape["seq"], "32-true")
    counts = count(cfg)
    table = Table(
        ["set-up", "computed at the backward's start, MiB", "computed total (bound), MiB",
         "measured peak per rank, MiB (max over ranks)", "measured ÷ computed at the backward's start"],
        title=f"Measured on CPU (gloo, 1 thread per process): GPT d {cfg.d_model} × {cfg.n_layers} layers, "
        f"{cfg.n_heads} heads, vocabulary {cfg.vocab_size}, {counts.total / 1e6:.2f}M parameters, micro-batch "
        f"{plan.batch} × {plan.seq} per process, fp32, {steps} steps; peak of torch's CPU allocator",
    )  # fmt: skip
    data = {}
    for setup in setups:
        ranks = run_setup(setup, shape, steps)
        m = memory(plan, setup.world, setup.fsdp, counts)
        at_backward, bound = m.at_backward(setup.checkpointing), m.total(setup.checkpointing)
        peak = max(r["peak_bytes"] for r in ranks)
        table.add(setup.name, f"{at_backward / MIB:.1f}", f"{bound / MIB:.1f}", f"{peak / MIB:.1f}",
                  f"{peak / at_backward:.2f}")  # fmt: skip
        data[setup.name] = {"setup": asdict(setup), "ranks": ranks, "computed": asdict(m),
                            "computed_at_backward": at_backward, "computed_total": bound}  # fmt: skip
    return table, data


def run(ctx: Context) -> Section:
    s = ctx.settings
    section = Section("sharding", "FSDP2 memory per device: computed plan and measured peaks")
    for paths, worlds in README_PLANS:
        section.tables.append(planning_table(paths, worlds))
    shape, setups = (SMOKE_SHAPE, SMOKE_SETUPS) if s.smoke else (FULL_SHAPE, FULL_SETUPS)
    steps = 2 if s.smoke else 3
    table, data = measured_table(shape, setups, steps)
    section.tables.append(table)
    section.data = {"measured": data}
    section.notes.append(
        "Computed: `experiments/bench/sharding_memory.py` (its docstring states every term; "
        "`python -m experiments.bench.sharding_memory -c <config>... --world 1,2,4,8` prints the plan of any GPT "
        "config). The total adds gradients to the backward's-start figure: a bound, since activations peak "
        "as the backward starts and gradients as it ends."
    )
    section.notes.append(
        "Measured: torch's CPU allocator (torch.profiler memory events) above the model's own tensors at the start, "
        "over the steps; allocations outside it (oneDNN, gloo buffers) are not seen."
    )
    return section


def main() -> None:
    parser = worker_parser()
    parser.add_argument("--plain", action="store_true", help="one unsharded process")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--precision", default="32-true", help="as the Trainer's: `*-mixed` autocasts")
    args = parser.parse_args()
    import torch.distributed as dist

    fsdp = not args.plain
    if fsdp:
        os.environ |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(args.port)}
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo", rank=args.rank, world_size=args.world)
    try:
        result = _measure(args.arch, args.batch, args.seq, args.steps, args.rank, args.world, fsdp, args.device,
                          args.precision)  # fmt: skip
    finally:
        if fsdp:
            dist.destroy_process_group()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
