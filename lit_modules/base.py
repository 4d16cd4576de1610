"""What every task's LightningModule shares: optimiser, schedule, compile, run bookkeeping."""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn

from models import ArchConfig

from .optim import OptimConfig, build_optimizer


class TaskModule(pl.LightningModule):
    """Base of the four task modules.

    Subclasses build `self.model` from `self.arch` in `__init__` and list their headline metrics
    in `hparam_metrics` (shown in TensorBoard's HParams tab).

    Args:
        arch: the model architecture (every ablation axis is a field: `--model.arch.norm rmsnorm`).
        optim: optimiser and schedule.
        data_info: values the data decides (vocabulary size, special ids, image shape), linked
            in by the CLI from the DataModule; they override the matching `arch` fields.
        compile: run the model through `torch.compile`.
    """

    hparam_metrics: tuple[str, ...] = ("val/loss",)

    def __init__(
        self,
        arch: ArchConfig,
        optim: OptimConfig,
        data_info: dict[str, Any] | None = None,
        compile: bool = False,
    ):
        super().__init__()
        self.data_info = dict(data_info or {})
        arch_fields = {k: v for k, v in self.data_info.items() if k in ArchConfig.__dataclass_fields__}
        self.arch = replace(arch, **arch_fields)
        self.optim = optim
        self.compile = compile
        self.save_hyperparameters()

    def configure_model(self) -> None:
        if self.compile and not isinstance(self.model, torch._dynamo.eval_frame.OptimizedModule):
            self.model = torch.compile(self.model)

    def configure_optimizers(self):
        optimizer, schedule = build_optimizer(self.model, self.optim, self.trainer.estimated_stepping_batches)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    @property
    def base_model(self) -> nn.Module:
        return getattr(self.model, "_orig_mod", self.model)

    def model_stats(self) -> dict[str, float]:
        """Parameter counts and forward FLOPs, logged at start and written to the sweep ledger."""
        model = self.base_model
        return {
            "params": model.num_parameters(),
            "params_non_embedding": model.num_parameters(non_embedding=True),
            "flops_per_token": model.flops_per_token(self.stats_seq_len()),
        }

    def stats_seq_len(self) -> int:
        return int(self.data_info.get("seq_len", self.arch.max_seq_len))

    def on_fit_start(self) -> None:
        stats = self.model_stats()
        for logger in self.loggers:
            flat = {f"arch/{k}": v for k, v in asdict(self.arch).items()}
            flat |= {f"optim/{k}": v for k, v in asdict(self.optim).items()} | stats
            # placeholders name the metrics the HParams tab shows; real values come from the run
            logger.log_hyperparams(flat, {m: math.nan for m in self.hparam_metrics})
            logger.log_metrics({f"model/{k}": float(v) for k, v in stats.items()}, step=0)
