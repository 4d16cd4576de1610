"""A sharded run's checkpoints (`--trainer.strategy=fsdp2`, `lit_modules.sharding`) and what reads them.

A sharded run saves a distributed checkpoint: `checkpoints/<name>.ckpt/` is a folder in which every rank writes its
own shards of the weights and optimiser states (torch.distributed.checkpoint: `*.distcp` and the index `.metadata`),
never gathered on one rank, and rank 0 Lightning's other state (`meta.pt`: step, loops, callbacks, hyperparameters).
Resuming `cli.py fit --ckpt_path <folder>` on any number of sharded processes reshards it on load.

Whatever reads one process's whole model from it (`cli.py predict`/`test`/`validate` unsharded, `cli.py export`,
`--model.init_from`, the committed-study tools) reads `consolidated(folder)`: one ordinary Lightning checkpoint
(`<name>.ckpt.consolidated.pt` beside the folder, made on demand from the shards on one process and remade when the
folder is newer), its weights and Lightning's state, without the optimiser states."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from models.finetune import DISTRIBUTED_METADATA

LIGHTNING_METADATA = "meta.pt"  # Lightning's (ModelParallelStrategy's) non-tensor state, written by rank 0
CONSOLIDATED_SUFFIX = ".consolidated.pt"


def is_sharded_checkpoint(path: str | Path) -> bool:
    """A distributed checkpoint's folder (its index written: a save that ended)."""
    path = Path(path)
    return path.is_dir() and (path / DISTRIBUTED_METADATA).is_file()


def read_consolidated(path: str | Path) -> dict:
    """The whole checkpoint of a distributed checkpoint's folder, on this one process: Lightning's state with the
    full `state_dict` (the optimiser states left out)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    path = Path(path)
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        whole = Path(scratch) / "whole.pt"
        dcp_to_torch_save(path, whole)  # one process, no process group: every shard read and joined
        tensors = torch.load(whole, map_location="cpu", weights_only=True)
    checkpoint = torch.load(path / LIGHTNING_METADATA, map_location="cpu", weights_only=True)
    checkpoint["state_dict"] = tensors["state_dict"]
    return checkpoint


def consolidated(path: str | Path) -> Path:
    """`path` itself when it is a checkpoint file; for a distributed checkpoint's folder, its consolidation
    (`read_consolidated`) saved beside it as `<folder>.consolidated.pt`, made now unless one newer than the folder's
    index exists. The file is written whole, then renamed into place (a reader never sees part of one)."""
    path = Path(path)
    if not is_sharded_checkpoint(path):
        return path
    target = path.with_name(path.name + CONSOLIDATED_SUFFIX)
    index_time = (path / DISTRIBUTED_METADATA).stat().st_mtime
    if target.is_file() and target.stat().st_mtime >= index_time:
        return target
    checkpoint = read_consolidated(path)
    descriptor, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{target.name}.")
    os.close(descriptor)
    try:
        torch.save(checkpoint, partial)
        os.replace(partial, target)
    finally:
        Path(partial).unlink(missing_ok=True)
    return target
