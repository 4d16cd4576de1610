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
from .predict import check_top_k, listed, ranked


class ImageClassifier(TaskModule):
    """Cross entropy (optionally label-smoothed) and top-1 accuracy.

    `cli.py predict` lists the `predict_top_k` most likely classes of each image with their probabilities
    (named by the DataModule's `class_names`), and its label where the data has one.

    Args:
        patch_size: side of the square patches.
        pool: `cls` token or `mean` pooling.
        label_smoothing: label smoothing of the training loss.
        predict_top_k: classes listed per image by `cli.py predict`.
    """

    hparam_metrics = ("val/loss", "val/acc")
    predict_args = ("predict_top_k",)

    def __init__(
        self,
        arch: ArchConfig = ArchConfig(),
        optim: OptimConfig = OptimConfig(),
        data_info: dict[str, Any] | None = None,
        compile: bool = False,
        patch_size: int = 2,
        pool: Pooling = "cls",
        label_smoothing: float = 0.0,
        predict_top_k: int = 5,
    ):
        super().__init__(arch, optim, data_info, compile)
        self.predict_top_k = check_top_k(predict_top_k)
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

    def predict_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> list[dict[str, Any]]:
        names = list(getattr(self.trainer.datamodule, "class_names", None) or map(str, range(self.num_classes)))
        probabilities = self.model(batch["images"]).float().softmax(-1)
        records = []
        for index, name, label, p in zip(batch["index"], batch["input"], batch["labels"].tolist(), probabilities):
            classes = ranked(p, self.predict_top_k, "class", names.__getitem__)
            record = {"index": int(index), "input": name, "output": classes}
            records.append(record | ({"label": names[label]} if label >= 0 else {}))  # -1: an image file, no label
        return records

    def predict_settings(self) -> dict[str, Any]:
        return {"top_k": self.predict_top_k}

    def describe_prediction(self, record: dict[str, Any]) -> str:
        label = f"  (label {record['label']!r})" if "label" in record else ""
        return f"{record['input']} -> {listed(record['output'], 'class')}{label}"

    def stats_seq_len(self) -> int:
        return self.base_model.num_tokens  # patches (+ CLS): set by the image and patch size, not max_seq_len

    def model_stats(self) -> dict[str, float]:
        stats = super().model_stats()
        stats["flops_per_token"] = self.base_model.flops_per_image()  # per image for a classifier
        return stats
