"""Image classification with a ViT."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from models import ArchConfig, ViT
from models.config import ConfigError
from models.vit import LearnedLayout, Pooling, check_vit_arch

from .base import TaskModule
from .optim import OptimConfig
from .prediction_writer import check_top_k, listed, ranked


@dataclass(frozen=True)
class MixConfig:
    """Mixup (Zhang et al. 2018) and CutMix (Yun et al. 2019) of training batches, through timm's
    `Mixup` (one mixing weight per batch; image i is mixed with image B-1-i). Off by default.

    Args:
        mixup_alpha: Mixup's weight is drawn from Beta(α, α); 0: no Mixup (DeiT: 0.8).
        cutmix_alpha: CutMix's box area is drawn from Beta(α, α); 0: no CutMix (DeiT: 1.0).
        prob: probability that a batch is mixed at all.
        switch_prob: with both on, the probability that a mixed batch uses CutMix rather than Mixup.
    """

    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0
    prob: float = 1.0
    switch_prob: float = 0.5

    def __post_init__(self) -> None:
        for name in ("mixup_alpha", "cutmix_alpha"):
            if getattr(self, name) < 0:
                raise ConfigError(f"mix.{name}={getattr(self, name)} must be 0 (off) or more (DeiT: 0.8 and 1.0)")
        for name in ("prob", "switch_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"mix.{name}={getattr(self, name)} must be a probability in [0, 1]")

    @property
    def on(self) -> bool:
        return self.mixup_alpha > 0 or self.cutmix_alpha > 0


def new_metrics(num_classes: int) -> torch.nn.ModuleDict:
    return torch.nn.ModuleDict({"loss": MeanMetric(), "acc": MulticlassAccuracy(num_classes, average="micro")})


class ImageClassifier(TaskModule):
    """Cross entropy (optionally label-smoothed) and top-1 accuracy.

    With `mix` on, training batches are mixed (Mixup/CutMix) and the loss is cross entropy against
    the mixed soft targets (label smoothing folded into them); validation and test stay on the
    unmixed images and hard labels.

    Evaluation runs one dataloader per image size (the DataModule's `eval_image_sizes`; the first is
    the training size) and, with more than one, logs `val/loss@<side>` and `val/acc@<side>` for each;
    `val/loss` and `val/acc` are taken at the training size. The ViT resamples its position table for
    another size (`models.vit`).

    `cli.py predict` lists the `predict_top_k` most likely classes of each image with their probabilities
    (named by the DataModule's `class_names`), and its label where the data has one.

    Args:
        patch_size: side of the square patches.
        pool: `cls` token or `mean` pooling.
        learned_layout: a `learned` position table's form, `1d` or `2d` (`models.vit.ViT`).
        label_smoothing: label smoothing of the training loss.
        mix: Mixup / CutMix of training batches (`--model.mix.mixup_alpha 0.8`).
        predict_top_k: classes listed per image by `cli.py predict`.
    """

    hparam_metrics = ("val/loss", "val/acc")
    predict_args = ("predict_top_k",)

    @classmethod
    def check_arguments(cls, args: dict[str, Any]) -> None:
        check_vit_arch(args.get("arch", ArchConfig()), args.get("learned_layout", "1d"))

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
        learned_layout: LearnedLayout = "1d",
        mix: MixConfig = MixConfig(),
        **finetune: Any,  # TaskModule's: init_from, init_replace, freeze, peft, quantize
    ):
        super().__init__(arch, optim, data_info, compile, **finetune)
        self.predict_top_k = check_top_k(predict_top_k)
        self.num_classes = int(self.data_info.get("num_classes", 10))
        self.model = ViT(
            self.arch,
            image_size=int(self.data_info.get("image_size", 32)),
            patch_size=patch_size,
            in_channels=int(self.data_info.get("in_channels", 3)),
            num_classes=self.num_classes,
            pool=pool,
            learned_layout=learned_layout,
        )
        self.label_smoothing, self.mix = label_smoothing, mix
        self.mixer = self._mixer() if mix.on else None
        # per stage, one loss and accuracy per evaluation dataloader (image size), grown at the first epoch
        self.metrics = torch.nn.ModuleDict(
            {stage: torch.nn.ModuleList([new_metrics(self.num_classes)]) for stage in ("val", "test")}
        )
        self.eval_sides: dict[str, dict[int, int]] = {"val": {}, "test": {}}

    def _mixer(self):
        from timm.data import Mixup  # imported on use: `import timm` takes seconds

        mix = self.mix
        return Mixup(
            mixup_alpha=mix.mixup_alpha,
            cutmix_alpha=mix.cutmix_alpha,
            prob=mix.prob,
            switch_prob=mix.switch_prob,
            label_smoothing=self.label_smoothing,
            num_classes=self.num_classes,
        )

    def mixed(self, images: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """Mixed images and their soft targets (B, num_classes). timm mixes pairs (i, B-1-i) of an even
        batch; the last image of an odd one (an epoch's last batch) stays as it is, with its own target."""
        from timm.data.mixup import mixup_target

        n = len(labels) - len(labels) % 2
        mixed, targets = self.mixer(images[:n], labels[:n])
        if n == len(labels):
            return mixed, targets
        rest = mixup_target(labels[n:], self.num_classes, smoothing=self.label_smoothing)
        return torch.cat((mixed, images[n:])), torch.cat((targets, rest.to(targets)))

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.mixer is None:
            return self.train_loss(self.model(batch["images"]), batch["labels"], self.label_smoothing)
        images, targets = self.mixed(batch["images"], batch["labels"])
        # cross entropy against soft targets (timm's SoftTargetCrossEntropy), a mean over the global batch
        logits = self.model(images)
        total = F.cross_entropy(logits, targets, reduction="sum")
        loss = self.global_mean(total, torch.tensor(len(targets), device=total.device))
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)
        return self.with_z_loss(loss, logits)

    def _start_evaluation(self, stage: str, loaders: int) -> None:
        # every process makes every loader's metrics, even one that gets no batch of it: their states
        # are summed over processes at the end
        while len(self.metrics[stage]) < loaders:
            self.metrics[stage].append(new_metrics(self.num_classes).to(self.device))
        patch = self.base_model.patch_size
        sides = getattr(self.trainer.datamodule, "eval_image_sizes", None) or []
        if any(side % patch for side in sides):
            raise ConfigError(
                f"data.eval_image_sizes={list(sides)}: every side must be a multiple of patch_size={patch}; "
                f"choose among {', '.join(str(patch * k) for k in range(1, 9))}, ..."
            )

    def _evaluate(self, batch: dict[str, torch.Tensor], stage: str, dataloader_idx: int) -> None:
        logits = self.model(batch["images"])
        self.eval_sides[stage].setdefault(dataloader_idx, batch["images"].shape[-1])
        metrics = self.metrics[stage][dataloader_idx]
        metrics["loss"].update(F.cross_entropy(logits, batch["labels"]), weight=len(batch["labels"]))
        metrics["acc"].update(logits, batch["labels"])

    def _end_evaluation(self, stage: str) -> None:
        # compute() syncs over processes, so every process calls it for every metric, in the same order
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*was called before the ``update`` method.*")
            values = [{name: metric.compute() for name, metric in metrics.items()} for metrics in self.metrics[stage]]
        for metrics in self.metrics[stage]:
            for metric in metrics.values():
                metric.reset()
        sides = self.eval_sides[stage]
        for idx, computed in enumerate(values):
            for name, value in computed.items():
                if idx == 0:  # the first loader evaluates at the training size
                    self.log(f"{stage}{self.eval_suffix}/{name}", value, prog_bar=True)
                if len(values) > 1 and idx in sides:
                    self.log(f"{stage}{self.eval_suffix}/{name}@{sides[idx]}", value)

    def on_validation_epoch_start(self) -> None:
        self._start_evaluation("val", len(self.trainer.num_val_batches))

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._evaluate(batch, "val", dataloader_idx)

    def on_validation_epoch_end(self) -> None:
        self._end_evaluation("val")

    def on_test_epoch_start(self) -> None:
        self._start_evaluation("test", len(self.trainer.num_test_batches))

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._evaluate(batch, "test", dataloader_idx)

    def on_test_epoch_end(self) -> None:
        self._end_evaluation("test")

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
