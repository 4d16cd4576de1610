"""ImageClassifier: validation loss and accuracy are over every image, whatever the batch sizes;
its FLOPs statistic is per image."""

from __future__ import annotations

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import EMAWeightAveraging

from contract.metrics import higher_is_better
from datamodules.images import ImageDataModule
from lit_modules import ImageClassifier
from lit_modules.image_classifier import MixConfig
from lit_modules.suite_cli import describe_data
from models import ArchConfig
from models.config import ConfigError


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


def _tiny(data: ImageDataModule, **kwargs) -> ImageClassifier:
    torch.manual_seed(0)
    arch = ArchConfig(d_model=32, n_layers=1, n_heads=2)
    return ImageClassifier(arch, data_info=describe_data(data), patch_size=2, **kwargs)


def _trainer(**kwargs) -> pl.Trainer:
    return pl.Trainer(logger=False, enable_progress_bar=False, enable_checkpointing=False, deterministic=True, **kwargs)


def test_metrics_at_each_image_size():
    """`eval_image_sizes` gives one loader per side, the training side first: `val/acc@<side>` for each,
    `val/acc` at the training side, each the accuracy of the images resized to that side."""
    data = ImageDataModule(dataset="digits", batch_size=128, eval_image_sizes=[12, 8, 16])
    model = _tiny(data)
    (metrics, *_) = _trainer().validate(model, datamodule=data, verbose=False)
    assert {k for k in metrics if "@" in k} == {f"val/{m}@{s}" for m in ("loss", "acc") for s in (8, 12, 16)}
    assert metrics["val/acc"] == metrics["val/acc@8"] and metrics["val/loss"] == metrics["val/loss@8"]
    model.eval()
    for side, loader in zip((8, 12, 16), data.val_dataloader()):
        with torch.no_grad():
            pairs = [(model.model(b["images"]).argmax(-1), b["labels"]) for b in loader]
        assert all(b["images"].shape[-1] == side for b in loader)
        correct = sum(int((p == y).sum()) for p, y in pairs)
        assert metrics[f"val/acc@{side}"] == pytest.approx(correct / 270)
    assert metrics["val/loss@12"] != metrics["val/loss@8"]  # the test can fail: the sides are really evaluated apart
    assert higher_is_better("val/acc@16") and not higher_is_better("val/loss@16")


def test_one_size_logs_as_before():
    data = ImageDataModule(dataset="digits", batch_size=128)
    (metrics,) = _trainer().validate(_tiny(data), datamodule=data, verbose=False)
    assert set(metrics) == {"val/loss", "val/acc"}


def test_sizes_must_fit_the_patches():
    data = ImageDataModule(dataset="digits", eval_image_sizes=[8, 9])
    with pytest.raises(ConfigError, match=r"data.eval_image_sizes=\[8, 9\].*patch_size=2"):
        _trainer().validate(_tiny(data), datamodule=data, verbose=False)


def test_mixup_trains_on_soft_targets():
    data = ImageDataModule(dataset="digits", batch_size=8)
    model = _tiny(data, mix=MixConfig(mixup_alpha=0.8, cutmix_alpha=1.0), label_smoothing=0.1)
    batch = next(iter(data.train_dataloader()))
    images, labels = batch["images"][:7].clone(), batch["labels"][:7]  # odd: the last image is not mixed
    np.random.seed(0)
    mixed, targets = model.mixed(images.clone(), labels)
    assert mixed.shape == images.shape and targets.shape == (7, 10)
    torch.testing.assert_close(targets.sum(-1), torch.ones(7))
    assert not torch.equal(mixed[:6], images[:6])
    torch.testing.assert_close(mixed[6], images[6])
    assert targets[6, labels[6]] == pytest.approx(0.9 + 0.01) and targets[6].min() == pytest.approx(0.01)
    assert (targets[:6].gt(0.02).sum(-1) == 2).all() or (labels[:6] == labels[:6].flip(0)).any()
    # the loss is cross entropy against those targets
    np.random.seed(0)
    loss = model.training_step({"images": images.clone(), "labels": labels}, 0)
    expected = -(targets * model.model(mixed).log_softmax(-1)).sum(-1).mean()
    torch.testing.assert_close(loss, expected)


@pytest.mark.parametrize("mode", ["mixup", "cutmix"])
def test_soft_targets_are_the_mixed_proportions(mode):
    """Each row of the soft targets sums to one and gives each label the share of the image that came
    from it (image i is mixed with image B-1-i): read off the pixels of images of one value each. The
    same NumPy seed gives the same batch again, another seed another one."""
    data = ImageDataModule(dataset="digits")
    mix = MixConfig(mixup_alpha=0.8 * (mode == "mixup"), cutmix_alpha=1.0 * (mode == "cutmix"))
    model = _tiny(data, mix=mix)  # no label smoothing: the targets are the proportions themselves
    labels = torch.arange(8)  # partners (i, 7 - i) never share a label
    images = labels.float().view(8, 1, 1, 1).expand(8, 1, 8, 8).contiguous()  # image i: every pixel i
    np.random.seed(0)
    mixed, targets = model.mixed(images.clone(), labels)
    partner = labels.flip(0)
    if mode == "mixup":  # one weight per batch: pixel = (1 - share) * own + share * partner's
        share = ((mixed - images) / (partner - labels).float().view(8, 1, 1, 1)).flatten(1)
        torch.testing.assert_close(share, share[:, :1].expand(8, 64))
        share = share[:, 0]
    else:  # one box pasted from the partner: the share is the box's area
        share = (mixed == partner.float().view(8, 1, 1, 1)).flatten(1).float().mean(1)
    assert 0 < float(share[0]) < 1, "nothing mixed: the test would not see the proportions"
    torch.testing.assert_close(targets.sum(-1), torch.ones(8))
    assert (targets >= 0).all() and (targets.gt(0).sum(-1) == 2).all()
    torch.testing.assert_close(targets[labels, partner], share)
    torch.testing.assert_close(targets[labels, labels], 1 - share)
    np.random.seed(0)
    again = model.mixed(images.clone(), labels)
    assert torch.equal(again[0], mixed) and torch.equal(again[1], targets)
    np.random.seed(1)
    assert not torch.equal(model.mixed(images.clone(), labels)[1], targets)


@pytest.mark.parametrize(("field", "value"), [("mixup_alpha", -1.0), ("prob", 1.5), ("switch_prob", -0.1)])
def test_mix_config_is_validated(field, value):
    with pytest.raises(ConfigError, match=rf"mix.{field}={value}"):
        MixConfig(**{field: value})


def test_ema_weights_are_evaluated():
    """Lightning's EMAWeightAveraging swaps the averaged weights in for validation and leaves them in
    the model at the end of training."""
    data = ImageDataModule(dataset="digits", batch_size=64)
    model = _tiny(data, learned_layout="2d")
    ema = EMAWeightAveraging(decay=0.5)
    trainer = _trainer(max_steps=6, limit_val_batches=1, val_check_interval=3, callbacks=[ema])
    trainer.fit(model, datamodule=data)
    averaged = ema._average_model.module.state_dict()
    for name, value in model.state_dict().items():
        assert torch.equal(value, averaged[name]), name
    ema_loss = trainer.callback_metrics["val/loss"]
    assert ema_loss == trainer.validate(model, datamodule=data, verbose=False)[0]["val/loss"]
    # the same run without the callback ends at other weights, with another validation loss
    plain = _tiny(data, learned_layout="2d")
    plain_trainer = _trainer(max_steps=6, limit_val_batches=1, val_check_interval=3)
    plain_trainer.fit(plain, datamodule=data)
    assert not torch.equal(plain.model.head.weight, model.model.head.weight)
    assert plain_trainer.callback_metrics["val/loss"] != ema_loss


class _Weights(pl.Callback):
    """Records the live ViT's and the EMA's parameters after each optimizer step (after the EMA's update)."""

    def __init__(self, ema: EMAWeightAveraging) -> None:
        self.ema, self.live, self.average = ema, [], []

    def on_train_batch_end(self, trainer, pl_module, *args) -> None:
        self.live.append({k: v.detach().clone() for k, v in pl_module.model.named_parameters()})
        averaged = self.ema._average_model.module.model
        self.average.append({k: v.detach().clone() for k, v in averaged.named_parameters()})


def test_ema_weights_trail_the_live_weights():
    """From the first step the average is a_t = d·a_(t-1) + (1 - d)·w_t of the live weights w_t, so after
    a few steps it is other weights than the live ones (that training keeps changing)."""
    data = ImageDataModule(dataset="digits", batch_size=64)
    model, ema = _tiny(data), EMAWeightAveraging(decay=0.8)
    weights = _Weights(ema)
    _trainer(max_steps=4, limit_val_batches=0, callbacks=[ema, weights]).fit(model, datamodule=data)
    live, average = weights.live, weights.average
    assert len(live) == 4
    for name, value in live[0].items():
        assert torch.equal(average[0][name], value), name  # the first update copies the weights
    for t in range(1, 4):
        for name, value in live[t].items():
            torch.testing.assert_close(average[t][name], 0.8 * average[t - 1][name] + 0.2 * value)
    moved = [name for name in live[3] if not torch.equal(live[3][name], live[0][name])]
    assert "head.weight" in moved and "stack.pos.table.weight" in moved
    assert all(not torch.allclose(average[3][name], live[3][name]) for name in moved)


@pytest.mark.parametrize(
    ("pos", "layout"), [("none", "1d"), ("learned", "1d"), ("learned", "2d"), ("sinusoidal", "1d")]
)
def test_every_scheme_is_evaluated_at_one_and_a_half_and_twice_the_size(pos, layout):
    """The resolution axis of the positional study: 8x8 digits also read at 12 and 16 px (6x6 and 8x8
    grids of 2x2 patches) by each positional form, each side's metrics its own."""
    data = ImageDataModule(dataset="digits", batch_size=270, eval_image_sizes=[8, 12, 16])
    torch.manual_seed(0)
    arch = ArchConfig(d_model=32, n_layers=1, n_heads=2, pos_encoding=pos)
    model = ImageClassifier(arch, data_info=describe_data(data), patch_size=2, learned_layout=layout)
    (metrics, *_) = _trainer().validate(model, datamodule=data, verbose=False)
    assert set(metrics) == {"val/loss", "val/acc"} | {f"val/{m}@{s}" for m in ("loss", "acc") for s in (8, 12, 16)}
    assert all(np.isfinite(value) for value in metrics.values())
    assert len({metrics[f"val/loss@{s}"] for s in (8, 12, 16)}) == 3  # three evaluations, not one copied
