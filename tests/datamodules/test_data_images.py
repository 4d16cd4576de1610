from pathlib import Path
from typing import get_args

import numpy as np
import pytest
import torch

from datamodules.images import IMAGE_DATASETS, ImageDataModule, ImageDatasetName


def test_registry_matches_literal() -> None:
    assert set(IMAGE_DATASETS) == set(get_args(ImageDatasetName))


@pytest.mark.parametrize(("name", "meta"), [("digits", (10, 8, 1)), ("cifar10", (10, 32, 3)), ("mnist", (10, 28, 1))])
def test_metadata_without_loading(name: ImageDatasetName, meta: tuple[int, int, int], tmp_path: Path) -> None:
    dm = ImageDataModule(name, cache_dir=str(tmp_path))
    assert (dm.num_classes, dm.image_size, dm.in_channels) == meta
    assert list(tmp_path.iterdir()) == []  # nothing downloaded


def test_digits_split_sizes_disjoint_and_stratified() -> None:
    dm = ImageDataModule(seed=3)
    splits = dm.splits
    assert {k: len(v) for k, v in splits.items()} == {"train": 1257, "val": 270, "test": 270}
    assert len(np.unique(np.concatenate(list(splits.values())))) == 1797  # disjoint, all used
    y = dm._arrays.train[1].numpy()
    overall = np.bincount(y) / len(y)
    for idx in splits.values():
        assert np.abs(np.bincount(y[idx], minlength=10) / len(idx) - overall).max() < 0.01
    assert all(np.array_equal(a, b) for a, b in zip(splits.values(), ImageDataModule(seed=3).splits.values()))
    assert not np.array_equal(splits["val"], ImageDataModule(seed=4).splits["val"])


def test_digits_batches() -> None:
    dm = ImageDataModule(batch_size=32)
    batch = next(iter(dm.train_dataloader()))
    assert batch["images"].shape == (32, 1, 8, 8) and batch["images"].dtype == torch.float32
    assert batch["labels"].shape == (32,) and batch["labels"].dtype == torch.long
    images = torch.cat([b["images"] for b in dm.val_dataloader()])
    assert abs(images.mean()) < 0.1 and abs(images.std() - 1) < 0.1  # normalised
    loader = dm.train_dataloader()
    first = next(iter(loader))["labels"]
    assert torch.equal(first, next(iter(dm.train_dataloader()))["labels"])  # seeded
    loader.batch_sampler.sampler.set_epoch(1)  # where Lightning sets the epoch
    assert not torch.equal(first, next(iter(loader))["labels"])  # reshuffled per epoch
    assert len(dm.data_checksum) == 64


def test_torchvision_missing_data_dir_is_clear(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="cifar10") as e:
        ImageDataModule("cifar10", data_dir=str(tmp_path)).train_dataloader()
    assert str(tmp_path) in str(e.value)
    assert list(tmp_path.iterdir()) == []  # data_dir given: no download attempted


def test_cifar_augmentation_only_on_train() -> None:
    spec = IMAGE_DATASETS["cifar10"]
    assert spec.augment is not None and IMAGE_DATASETS["digits"].augment is None
    image = torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8)
    torch.manual_seed(0)
    out = spec.augment()(image)
    assert out.shape == image.shape and out.dtype == torch.uint8
