"""ImageClassifier: validation loss and accuracy are over every image, whatever the batch sizes;
its FLOPs statistic is per image."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F

from datamodules.images import ImageDataModule
from lit_modules import ImageClassifier
from lit_modules.cli import describe_data
from models import ArchConfig


def test_loss_and_accuracy_over_uneven_batches():
    data = ImageDataModule(dataset="digits", batch_size=64)  # 270 validation images: 4 x 64 + 14
    torch.manual_seed(0)
    model = ImageClassifier(ArchConfig(d_model=32, n_layers=1, n_heads=2), data_info=describe_data(data), patch_size=2)
    trainer = pl.Trainer(logger=False, enable_progress_bar=False, enable_checkpointing=False, deterministic=True)
    (metrics,) = trainer.validate(model, datamodule=data, verbose=False)

    model.eval()
    losses, correct, n = [], 0, 0
    with torch.no_grad():
        for batch in data.val_dataloader():
            logits = model.model(batch["images"])
            losses.append(F.cross_entropy(logits, batch["labels"], reduction="sum"))
            correct += int((logits.argmax(-1) == batch["labels"]).sum())
            n += len(batch["labels"])
    assert n % 64 != 0, "even batches: the test would not tell per-image from per-batch averaging"
    assert metrics["val/loss"] == pytest.approx(float(sum(losses)) / n, rel=1e-5)
    assert metrics["val/acc"] == pytest.approx(correct / n)


def test_flops_statistic_is_per_image():
    data = ImageDataModule(dataset="digits")
    model = ImageClassifier(ArchConfig(d_model=32, n_layers=2, n_heads=2), data_info=describe_data(data), patch_size=2)
    stats = model.model_stats()
    assert stats["flops_per_token"] == model.model.flops_per_image()
    tokens = (8 // 2) ** 2 + 1  # 4x4 patches + CLS
    assert stats["flops_per_token"] > tokens * 2 * 2 * 12 * 32 * 32  # at least the blocks' matmuls on every token
