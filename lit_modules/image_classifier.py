"""Image classification with a ViT."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from models import ArchConfig, ViT
from models.vit import Pooling

from .base import TaskModule
from .optim import OptimConfig


class ImageClassifier(TaskModule):
    """Cross entropy (optionally label-smoothed) and top-1 accuracy.

    Args:
        patch_size: side of the square patches.
        pool: `cls` token or `mean` pooling.
        label_smoothing: label smoothing of the training loss.
    """

    hparam_metrics = ("val/loss", "val/acc")

    def __init__(
        self,
        arch: ArchConfig = ArchConfig(),
        optim: OptimConfig = OptimConfig(),
        data_info: dict[str, Any] | None = None,
        compile: bool = False,
        patch_size: int = 2,
        pool: Pooling = "cls",
        label_smoothing: float = 0.0,
    ):
        super().__init__(arch, optim, data_info, compile)
        self.num_classes = int(self.data_info.get("num_classes", 10))
        self.model = ViT(
            self.arch,
            image_size=int(self.data_info.get("image_size", 32)),
            patch_size=patch_size,
            in_channels=int(self.data_info.get("in_channels", 3)),
            num_classes=self.num_classes,
            pool=pool,
        )
        self.label_smoothing = label_smoothing
        self.metrics = torch.nn.ModuleDict(
            {
                stage: torch.nn.ModuleDict(
                    {"loss": MeanMetric(), "acc": MulticlassAccuracy(self.num_classes, average="micro")}
                )
                for stage in ("val", "test")
            }
        )

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.train_loss(self.model(batch["images"]), batch["labels"], self.label_smoothing)

    def _evaluate(self, batch: dict[str, torch.Tensor], stage: str) -> None:
        logits = self.model(batch["images"])
        metrics = self.metrics[stage]
        metrics["loss"].update(F.cross_entropy(logits, batch["labels"]), weight=len(batch["labels"]))
        metrics["acc"].update(logits, batch["labels"])
        for name, metric in metrics.items():
            self.log(f"{stage}/{name}", metric, prog_bar=True, batch_size=len(batch["labels"]))

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def stats_seq_len(self) -> int:
        return self.base_model.num_tokens  # patches (+ CLS): set by the image and patch size, not max_seq_len

    def model_stats(self) -> dict[str, float]:
        stats = super().model_stats()
        stats["flops_per_token"] = self.base_model.flops_per_image()  # per image for a classifier
        return stats
