"""The stable phase of a sweep's `horizons:` (`experiments.sweep.horizons`): one run of the longest horizon, saved at
every horizon's decay start and ended at its own, from which each horizon's decay branch resumes.

The run is configured as the longest horizon's run (`trainer.max_steps` = that horizon, so its schedule is that
run's: `lit_modules.schedules` gives every WSD or constant run the same rate until its own decay starts); this
callback saves the full training state at each branch point and ends training at the last one. A branch resumed
from `step<k>.ckpt` with its own `trainer.max_steps` then follows its own schedule from step k (its scheduler is
built for its length; the checkpoint restores the weights, the optimizer, the step, the data position and the
callbacks' state), so it trains what the same run from scratch would have.
"""

from __future__ import annotations

import os
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Checkpoint

from contract.run_folder import step_checkpoint


class BranchPoints(Checkpoint):
    """Saves the training state at each of `steps` as `dirpath/step<k>.ckpt` and ends training at the last.

    A `Checkpoint` subclass, so Lightning runs it after every other callback's `on_train_batch_end`: the state it
    saves is the step's whole state, as `ModelCheckpoint`'s is. Each file is written under a temporary name and
    renamed: a run killed while saving leaves none (it is saved again as the resumed run passes the step, or at
    once when it resumes at the step itself: killed after the sweep's `ModelCheckpoint` saved that step).

    Args:
        dirpath: the folder of the files (a sweep gives the run's `checkpoints/`).
        steps: global steps (each a horizon's decay start), at least 1.
    """

    def __init__(self, dirpath: str, steps: list[int]):
        if not steps or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in steps):
            raise ValueError(f"BranchPoints: steps={steps!r} needs global steps of at least 1")
        self.dirpath, self.steps = Path(dirpath), sorted(set(steps))
        self._saved: set[int] = set()

    @property
    def last(self) -> int:
        return self.steps[-1]

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after the optimizer and its schedule were built for `trainer.max_steps` (the longest horizon), and after
        # every other callback's `on_train_start` (Lightning runs a `Checkpoint` last), so what they place by the
        # run's length (a uniform average's window) is placed as in the longest horizon's run; a run restored at
        # the last branch point is done at once
        trainer.fit_loop.epoch_loop.max_steps = self.last
        # a run resumed at a branch point never passes it again; what it restored is that step's state
        step = trainer.global_step
        if step in self.steps and trainer.strategy.broadcast(not step_checkpoint(self.dirpath, step).exists()):
            self._save(trainer, step)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step  # counted up after the optimizer step: the state a run resumed here starts from
        if step not in self.steps or step in self._saved:  # (accumulating micro-batches see one step many times)
            return
        self._save(trainer, step)

    def _save(self, trainer: pl.Trainer, step: int) -> None:
        self._saved.add(step)
        path = step_checkpoint(self.dirpath, step)
        partial = path.with_name(f".{path.name}.part")
        trainer.save_checkpoint(partial)  # every process takes part; the first writes
        if trainer.is_global_zero:
            os.replace(partial, path)
