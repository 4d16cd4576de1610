"""Sharded data parallelism (FSDP2): `--trainer.strategy=fsdp2` shards every `Block`'s parameters, gradients and
optimiser states over the processes, through Lightning's `ModelParallelStrategy` and PyTorch's `fully_shard`.

Why `ModelParallelStrategy` with `fully_shard` (FSDP2) and not Lightning's `FSDPStrategy` (FSDP1):
- FSDP2 is PyTorch's maintained FSDP (torchtitan, OLMo-core); FSDP1's `FlatParameter` is deprecated. Each parameter
  becomes a `DTensor` sharded on dim 0, so the model's own parameters are what the optimiser sees:
  `build_optimizer`'s per-parameter groups (decay, positional lr, µP/CompleteP factors keyed by `id(param)`) are
  built after `configure_model` from the sharded parameters themselves, unchanged. FSDP1 flattens a unit's
  parameters into one `FlatParameter` and needs `use_orig_params=True` to keep such groups at all.
- The sharding is the module's own (`configure_model`: each `Block` a unit, then the root for the embeddings and
  heads), composes with activation checkpointing (`torch.utils.checkpoint` around a sharded block re-gathers its
  parameters in the recomputation) and with `torch.compile` (applied after sharding, `StartingWeights`).
- Its distributed checkpoint (torch.distributed.checkpoint, DCP) is written by every rank, its own shards, never
  gathered on one rank, and loads on any number of processes: the reshard of a resumed run (`checkpoint_files`).
- It runs on CPU with gloo, so 1 process = 2 processes is tested here like DDP (tests/test_fsdp.py).

Mixed precision is Lightning's precision plugin as it sets it for this strategy (`bf16-mixed`: autocast over
fp32 parameters; the sharded parameters, gradients and reduce-scatter stay fp32, as under DDP).
`ModelParallelStrategy` alone splits the processes of a node into tensor-parallel ranks; `ShardedDataParallel`
makes every process a data-parallel rank (no tensor parallelism), which is what FSDP is."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from lightning.pytorch.strategies import ModelParallelStrategy, StrategyRegistry
from torch import nn

from models.block import Block

STRATEGY_NAME = "fsdp2"


class ShardedDataParallel(ModelParallelStrategy):
    """`ModelParallelStrategy` with every process a data-parallel rank: FSDP2 over nodes × devices.

    Args:
        save_distributed_checkpoint: each rank writes its shards (a checkpoint folder that reshards on load);
            False gathers a full single-file checkpoint on rank 0.
        kwargs: `ModelParallelStrategy`'s (`process_group_backend`, `timeout`).
    """

    def __init__(self, save_distributed_checkpoint: bool = True, **kwargs: Any):
        super().__init__(
            data_parallel_size="auto",
            tensor_parallel_size=1,
            save_distributed_checkpoint=save_distributed_checkpoint,
            **kwargs,
        )
        self.distributed_checkpoints = save_distributed_checkpoint

    def setup_environment(self) -> None:
        # every process shards the model (ModelParallelStrategy's "auto" would be one data-parallel rank per node);
        # (ModelParallelStrategy's private attribute, Lightning 2.6: its constructor takes it before the world is known)
        if self._data_parallel_size == "auto":
            self._data_parallel_size = self.num_nodes * self.num_processes
        super().setup_environment()

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None) -> None:
        """A distributed checkpoint written whole into `<path>.partial`, then swapped into place by rank 0: Lightning
        writes the shards into the folder in place, so a kill while `last.ckpt` is re-saved would leave the last
        save's index over a mix of two saves' shards (the sweep would resume from it). Killed here, `<path>` is the
        last whole save, or missing between the two renames (a sweep then starts the run over)."""
        if not self.distributed_checkpoints:
            return super().save_checkpoint(checkpoint, filepath, storage_options)
        path = Path(self.broadcast(str(filepath)))
        partial, old = path.with_name(path.name + ".partial"), path.with_name(path.name + ".old")
        if self.global_rank == 0:
            _remove(partial)
        self.barrier()
        super().save_checkpoint(checkpoint, partial, storage_options)
        self.barrier()
        if self.global_rank == 0:
            _remove(old)
            if path.exists():
                path.rename(old)
            partial.rename(path)
            _remove(old)
        self.barrier()
        return None

    # Evaluation gathers the whole model once and keeps it gathered until it ends: a sharded forward is a collective,
    # and processes may see different numbers of evaluation batches (an uneven split of a validation set) or run a
    # forward alone (rank 0's samples at the end of a validation); then no forward calls a collective, as under DDP.
    # The gathered weights are the parameters only (no gradients, no optimiser states), freed when evaluation ends.
    def on_validation_start(self) -> None:
        gather_whole(self.model)

    def on_validation_end(self) -> None:
        reshard(self.model)

    on_test_start = on_predict_start = on_validation_start
    on_test_end = on_predict_end = on_validation_end


# Lightning's registry: `--trainer.strategy=fsdp2` is this strategy (Lightning's own "fsdp", FSDP1's FSDPStrategy, is
# left as it is)
StrategyRegistry.register(
    STRATEGY_NAME,
    ShardedDataParallel,
    description="FSDP2 (fully_shard per Block) over every process: the suite's sharded data parallelism",
)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def sharded_strategy(trainer: Any) -> bool:
    """Whether the trainer shards the model (`ModelParallelStrategy` or ours)."""
    return trainer is not None and isinstance(trainer.strategy, ModelParallelStrategy)


def shard(model: nn.Module, mesh: Any) -> int:
    """`fully_shard` on each `Block` of `model`, then on `model` (embeddings, norms, heads: the root unit). The
    default `MixedPrecisionPolicy` keeps the parameters' dtype (Lightning's plugin autocasts). Returns the number
    of blocks; a model already sharded is left as it is."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    if isinstance(model, FSDPModule):
        return sum(isinstance(m, Block) for m in model.modules())
    blocks = [m for m in model.modules() if isinstance(m, Block)]
    for block in blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return len(blocks)


def shard_task_model(module: Any) -> None:
    """The task module's `self.model` sharded over the data-parallel mesh, when its trainer shards."""
    trainer = module._trainer
    if not sharded_strategy(trainer):
        return
    shard(getattr(module.model, "_orig_mod", module.model), module.device_mesh["data_parallel"])  # (compiled: its own)


def _units(model: nn.Module | None) -> list[Any]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)] if model is not None else []


def gather_whole(model: nn.Module | None) -> None:
    """Every sharding unit's parameters all-gathered now (a collective), and kept after each forward."""
    for unit in _units(model):
        unit.set_reshard_after_forward(False, recurse=False)
        unit.unshard()


def reshard(model: nn.Module | None) -> None:
    """Back to the shards (no collective): each unit again frees its gathered parameters after its forward."""
    for unit in _units(model):
        unit.reshard()
        unit.set_reshard_after_forward(True, recurse=False)
