"""Where a run's weights start and which of them train: `init_from` (a checkpoint or a reference model), the
PEFT method's added parameters, the freezing policy, the sharding (`lit_modules.sharding`)
and `torch.compile` over the result."""

from __future__ import annotations

from pathlib import Path

import torch

from models.config import ConfigError, plugin_settings
from models.finetune import load_weights, read_weights, set_trainable

from .sharded_checkpoints import consolidated
from .sharding import shard_task_model


class StartingWeights:
    """Mixin of `TaskModule` (`self.model`, `self.init_from`, `self.init_replace`, `self.peft`, `self.freeze`,
    `self.compile`)."""

    _tuned = False  # prepare_model has run

    def prepare_model(self) -> None:
        """Loads `init_from`, adds the PEFT method's parameters and sets which parameters train. Runs once,
        from `configure_model`: before a checkpoint is restored (a resumed or evaluated run's checkpoint holds
        the adapters, so they must exist) and before the optimiser is made."""
        if self._tuned:
            return
        self._tuned = True
        variants = plugin_settings(getattr(self.model, "cfg", None))
        if self.init_from and Path(self.init_from).is_dir() and variants:
            raise ConfigError(
                f"model.init_from: {self.init_from} is a reference model, but {'; '.join(variants)} has no "
                "equivalent in any reference family; start from a suite checkpoint, or use a built-in variant"
            )
        if self.init_from:
            # a sharded run's checkpoint folder: its consolidation (`lit_modules.sharded_checkpoints`)
            weights = read_weights(consolidated(self.init_from))
            load_weights(self.model, weights, self.init_replace, source=str(self.init_from))
        set_trainable(self.model, self.peft, self.freeze, self.init_replace)

    def configure_model(self) -> None:
        self.prepare_model()
        shard_task_model(self)  # under `--trainer.strategy=fsdp2`: each Block a unit (lit_modules.sharding)
        if self.compile and not isinstance(self.model, torch._dynamo.eval_frame.OptimizedModule):
            self.model = torch.compile(self.model)
