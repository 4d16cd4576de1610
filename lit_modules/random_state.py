"""Checkpoints carry the random number generators' states, so a run resumed from one (after a kill, or a decay
branch of a sweep's `horizons:`) draws the dropout masks the uninterrupted run would have drawn."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from lightning.pytorch.trainer.states import TrainerFn

RNG_KEY = "rng_states"  # the checkpoint's entry


def rng_states() -> dict[str, Any]:
    """This process's generators: torch's (CPU, and each GPU's once CUDA is initialised), numpy's and Python's.

    Plain types and tensors only: a checkpoint must load with `torch.load(weights_only=True)` (LightningCLI reads
    its hyperparameters that way)."""
    kind, keys, position, has_gauss, gauss = np.random.get_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    return {
        "torch": torch.get_rng_state(),
        "cuda": cuda,
        "numpy": [kind, keys.tolist(), int(position), int(has_gauss), float(gauss)],
        "python": random.getstate(),
    }


def set_rng_states(states: dict[str, Any]) -> None:
    """Restores what `rng_states` saved (the GPUs' only where as many are visible)."""
    torch.set_rng_state(states["torch"])
    cuda = states.get("cuda") or []
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
    kind, keys, position, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), position, has_gauss, gauss))
    version, internal, gauss_next = states["python"]
    random.setstate((version, tuple(internal), gauss_next))


class RandomStateCheckpoints:
    """Mixin of `TaskModule` (`self._trainer`): every checkpoint saves the generators' states, and training restored
    from one sets them back (evaluating a checkpoint leaves them as they are). A checkpoint saved before this has
    none: training restored from it draws as before."""

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)  # type: ignore[misc]
        checkpoint[RNG_KEY] = rng_states()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)  # type: ignore[misc]
        trainer = self._trainer  # type: ignore[attr-defined]
        if RNG_KEY in checkpoint and trainer is not None and trainer.state.fn == TrainerFn.FITTING:
            set_rng_states(checkpoint[RNG_KEY])
