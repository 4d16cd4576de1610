"""Memory per device of a GPT trained under FSDP2 (`--trainer.strategy fsdp2`, `lit_modules.sharding`), computed:
parameters, gradients and AdamW states sharded over N devices, the unsharded working set FSDP gathers, and the
activations of one micro-batch with and without activation checkpointing. Nothing is allocated: the model is
built on the `meta` device, so a 1.3B model is counted exactly in milliseconds.

    python -m experiments.bench.sharding_memory -c configs/gpt/base.yaml -c configs/gpt/gpu.yaml --world 1,2,4,8

Bytes per device, N devices, P parameters (FSDP2 shards each parameter on dim 0 and pads it to N equal rows,
so the shard is Σ ceil(rows/N)·cols, P/N when N divides every dim 0):
- parameters, gradients: p·P/N, p = 4 (fp32; `bf16-mixed` keeps fp32 shards and reduce-scatters fp32 gradients);
- AdamW: two states per parameter in the parameter's dtype, 2·p·P/N;
- unsharded working set (FSDP only): the root unit (embeddings, final norm, head) stays gathered from forward to
  backward, a block is gathered while the next is prefetched, and a block's and the root's full gradients live
  until reduce-scatter: p·(2·root + 3·block);
- activations, one micro-batch of b sequences of s tokens, width h, a heads, L blocks, vocabulary V, activation
  element size e (2 under 16-bit autocast, else 4), residual stream in the parameters' dtype r. A pre-norm block
  saves per token the 16·h elements Korthikanti et al. 2022 count (arXiv 2205.05198, §4.1, their 34·s·b·h bytes
  less the two dropout masks, in elements): both norms' inputs (2h, the residual stream: r), the QKV input, Q,
  K, V and the attention output, which is the output projection's input (5h), the FFN input (h), GELU's input
  and output (8h). SDPA's flash/memory-efficient kernels keep no s×s scores (the paper's 5·a·s² term) but a
  fp32 logsumexp per head and query (4·a bytes); dropout keeps a 1-byte mask per residual branch (2h bytes;
  SDPA's own attention dropout keeps none). Under autocast a block also keeps its weights' 16-bit copies.
      block = s·b·(h·(14·e + 2·r + 2·[dropout]) + 4·a) + [autocast]·e·block_params
  (the code counts Q, K, V and the FFN's hidden width as configured: grouped-query K and V, a gated FFN's three
  hidden tensors; the model is the GPT the config builds, the only family planned here)
      head  = s·b·(h·(r + e + [dropout]) + V·(e + 8))   (the final norm's input, the head's input, the embedding
              dropout's mask, the logits, the fp32 log-probabilities the loss keeps and the logits' fp32
              gradient as the backward starts; a Lightning training step returns the loss alone, so nothing
              else holds the logits)
      no checkpointing:   L·block + head
      full checkpointing: L·s·b·h·r (each block's input) + max(block, head): one block is recomputed at a
                          time, after the head's backward has freed the logits
  Measured on CPU in fp32 (`experiments.bench.sharding`): 16.05·h·4 bytes per token per added layer, and
  11.6 bytes per token per vocabulary entry.
The total adds the columns: a bound, since activations peak at the start of the backward and gradients at its
end. The measured peaks (`experiments.bench.sharding`) check these terms on CPU processes.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from models import GPT, ArchConfig
from models.block import Block
from models.config import GATED_ACTIVATIONS

from .tables import Table

ROOT = Path(__file__).resolve().parents[2]
GPU_CONFIG = ("configs/gpt/base.yaml", "configs/gpt/gpu.yaml")
CONFIG_1B3 = (*GPU_CONFIG, "configs/gpt/gpt_1b3.yaml")
README_PLANS = ((GPU_CONFIG, (1, 2, 4, 8)), (CONFIG_1B3, (8,)))  # the README's planning tables


@dataclass(frozen=True)
class Plan:
    """A run to plan for: the architecture, the micro-batch per device and the trainer's precision."""

    arch: ArchConfig
    batch: int  # sequences per device per step (`data.batch_size`: every process takes a batch)
    seq: int
    precision: str = "32-true"

    @property
    def param_bytes(self) -> int:
        """Bytes of a parameter (and its gradient, and each AdamW state): 16-bit only under `*-true` 16-bit."""
        return 2 if self.precision in ("bf16-true", "16-true") else 4

    @property
    def act_bytes(self) -> int:
        """Bytes of an activation element: 16-bit under autocast or 16-bit parameters."""
        return 2 if self.precision.startswith(("bf16", "16")) else 4

    @property
    def autocast(self) -> bool:
        return self.precision.endswith("-mixed")


def resolve(paths: list[str] | tuple[str, ...], batch: int | None = None, **overrides) -> Plan:
    """The `Plan` of `cli.py fit -c A -c B ...`: model arch merged key by key (later files win), the data's
    `seq_len` and `batch_size` (or `batch`), the BPE vocabulary, `trainer.precision`; `overrides` replace arch
    fields."""
    arch: dict = {}
    data: dict = {}
    precision = "32-true"
    for path in paths:
        config = yaml.safe_load((ROOT / path).read_text()) or {}
        model_args = (config.get("model") or {}).get("init_args") or {}
        arch |= model_args.get("arch") or {}
        data |= (config.get("data") or {}).get("init_args") or {}
        precision = str((config.get("trainer") or {}).get("precision", precision))
    if data.get("tokenizer") != "bpe" and "vocab_size" not in overrides:
        raise ValueError(f"{list(paths)}: the vocabulary is the data's ({data.get('tokenizer')!r} tokenizer); "
                         "pass vocab_size= to plan for it")  # fmt: skip
    seq = int(data["seq_len"])
    fields = {"vocab_size": data.get("bpe_vocab_size"), "max_seq_len": seq} | arch | overrides
    return Plan(ArchConfig(**fields), batch or int(data["batch_size"]), seq, precision)


@dataclass(frozen=True)
class Counts:
    """Parameter counts of the model a config builds, from a meta-device model."""

    total: int
    block: int  # one block's (the largest)
    root: int  # the root unit's: every parameter outside the blocks (embeddings, final norm, untied head)
    rows: tuple[tuple[int, int], ...]  # (dim 0, elements per row) of each parameter, how FSDP2 shards it

    def shard(self, world: int) -> int:
        """Elements of one device's shard: each parameter padded to `world` equal parts on dim 0."""
        return sum(math.ceil(rows / world) * cols for rows, cols in self.rows)


def count(cfg: ArchConfig) -> Counts:
    with torch.device("meta"):
        model = GPT(cfg)
    params = list(model.parameters())  # each once: a tied head is the token table
    blocks = [m for m in model.modules() if isinstance(m, Block)]
    in_blocks = {id(p) for b in blocks for p in b.parameters()}
    rows = tuple((p.shape[0], p[0].numel()) if p.dim() else (1, 1) for p in params)
    return Counts(
        total=sum(p.numel() for p in params),
        block=max(sum(p.numel() for p in b.parameters()) for b in blocks),
        root=sum(p.numel() for p in params if id(p) not in in_blocks),
        rows=rows,
    )


@dataclass(frozen=True)
class Memory:
    """Bytes per device of one set-up (`memory`)."""

    params: int
    grads: int
    optimizer: int
    unsharded: int
    activations: int
    activations_ckpt: int

    def total(self, checkpointing: bool = False) -> int:
        """Every column added: a bound on the peak (see `at_backward`)."""
        return self.grads + self.at_backward(checkpointing)

    def at_backward(self, checkpointing: bool = False) -> int:
        """At the backward's start, where activations peak: every term but the gradients, not yet written."""
        acts = self.activations_ckpt if checkpointing else self.activations
        return self.params + self.optimizer + self.unsharded + acts


def activations(plan: Plan, counts: Counts, checkpointing: bool) -> int:
    """Activation bytes of one micro-batch (the module docstring's formula)."""
    cfg, e, r = plan.arch, plan.act_bytes, plan.param_bytes
    tokens, h, drop = plan.batch * plan.seq, cfg.d_model, int(cfg.dropout > 0)
    q, kv = cfg.n_heads * cfg.d_head, cfg.kv_heads * cfg.d_head
    hidden = (3 if cfg.activation in GATED_ACTIVATIONS else 2) * cfg.ffn_dim  # the activation's inputs and output
    saved = 2 * h + 2 * q + 2 * kv + hidden  # at e: the two sublayers' inputs, Q, K, V, attention output, FFN
    block = tokens * (saved * e + h * (2 * r + 2 * drop) + 4 * cfg.n_heads)
    block += e * counts.block if plan.autocast else 0
    head = tokens * (h * (r + e + drop) + cfg.vocab_size * (e + 8))
    if checkpointing:
        return cfg.n_layers * tokens * h * r + max(block, head)
    return cfg.n_layers * block + head


def memory(plan: Plan, world: int, fsdp: bool = True, counts: Counts | None = None) -> Memory:
    """Bytes per device on `world` devices (FSDP2 full shard; `fsdp=False`: one unsharded process)."""
    if not fsdp and world != 1:
        raise ValueError("an unsharded run holds the whole model: plan it with world=1")
    counts = counts or count(plan.arch)
    p = plan.param_bytes
    shard = counts.shard(world) if fsdp else counts.total
    return Memory(
        params=p * shard,
        grads=p * shard,
        optimizer=2 * p * shard,
        unsharded=p * (2 * counts.root + 3 * counts.block) if fsdp else 0,
        activations=activations(plan, counts, False),
        activations_ckpt=activations(plan, counts, True),
    )


def gib(n: float) -> str:
    return f"{n / 2**30:.2f}"


def planning_table(paths: tuple[str, ...], worlds: tuple[int, ...], batch: int | None = None) -> Table:
    """GiB per device of the config `paths` on each of `worlds` devices (FSDP2), both checkpointing settings."""
    plan = resolve(paths, batch)
    counts = count(plan.arch)
    cfg = plan.arch
    title = (f"`{' + '.join(Path(p).name for p in paths)}`: {counts.total / 1e6:,.1f}M parameters (d {cfg.d_model} "
             f"× {cfg.n_layers} layers, {cfg.n_heads} heads, vocabulary {cfg.vocab_size}), micro-batch "
             f"{plan.batch} × {plan.seq} tokens per device, `{plan.precision}`; GiB per device")  # fmt: skip
    table = Table(["devices", "parameters", "gradients", "AdamW states", "unsharded working set", "activations",
                   "activations, checkpointed", "total", "total, checkpointed"], title=title)  # fmt: skip
    for world in worlds:
        m = memory(plan, world, counts=counts)
        table.add(world, gib(m.params), gib(m.grads), gib(m.optimizer), gib(m.unsharded), gib(m.activations),
                  gib(m.activations_ckpt), gib(m.total()), gib(m.total(True)))  # fmt: skip
    return table


def readme_tables() -> str:
    """The README's planning tables (`python -m experiments.bench.sharding_memory --readme`)."""
    return "\n\n".join(planning_table(paths, worlds).markdown() for paths, worlds in README_PLANS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.bench.sharding_memory",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("-c", "--config", action="append", default=[], help="a config file, as `cli.py fit -c`")
    parser.add_argument("--world", default="1,2,4,8", help="comma-separated numbers of devices")
    parser.add_argument("--batch", type=int, help="micro-batch per device (default: the config's batch_size)")
    parser.add_argument("--readme", action="store_true", help="print the README's tables")
    args = parser.parse_args(argv)
    if args.readme:
        print(readme_tables())
        return 0
    if not args.config:
        parser.error("give the run's config files (-c ...), or --readme")
    print(planning_table(tuple(args.config), tuple(int(w) for w in args.world.split(",")), args.batch).markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
