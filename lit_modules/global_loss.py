"""The training loss as a mean over the global batch, and PaLM's z-loss: the same number on 1 or N processes."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from contract.labels import IGNORE_INDEX


class GlobalLoss:
    """Mixin of `TaskModule` (a LightningModule: `self.log`, `self._trainer`, `self.optim`)."""

    def global_mean(self, total: Tensor, count: Tensor) -> Tensor:
        """`total / count` over the global batch: each process divides its own sum by the mean count
        per process, so DDP's gradient average is the gradient of the global batch's mean, however the
        labelled positions fall between processes. With one process, `total / count`.

        Called by every process at every training step (it is a collective under DDP).
        """
        count = count.detach().to(total.dtype)
        trainer = self._trainer
        if trainer is not None and trainer.world_size > 1:
            count = trainer.strategy.reduce(count, reduce_op="mean")
        return total / count.clamp_min(1)

    def train_loss(self, logits: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> Tensor:
        """Cross-entropy over the labelled positions of the global batch (`IGNORE_INDEX` skipped),
        logged as `train/loss` (the global batch's value, the same on 1 or N processes)."""
        total = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            labels.reshape(-1),
            ignore_index=IGNORE_INDEX,
            label_smoothing=label_smoothing,
            reduction="sum",
        )
        labelled = labels.reshape(-1) != IGNORE_INDEX
        loss = self.global_mean(total, labelled.sum())
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)
        return self.with_z_loss(loss, logits, labelled)

    def with_z_loss(self, loss: Tensor, logits: Tensor, labelled: Tensor | None = None) -> Tensor:
        """`loss` plus PaLM's z-loss (`optim.z_loss`): log Z of each labelled position's softmax, squared,
        averaged over the global batch like the loss, logged as `train/z_loss`. Every process calls it."""
        if not self.optim.z_loss:
            return loss
        log_z = logits.reshape(-1, logits.shape[-1]).float().logsumexp(-1)
        if labelled is None:
            labelled = torch.ones_like(log_z, dtype=torch.bool)
        z_loss = self.global_mean(log_z.square().masked_fill(~labelled, 0.0).sum(), labelled.sum())
        self.log("train/z_loss", z_loss, sync_dist=True)
        return loss + self.optim.z_loss * z_loss
