import random
from pathlib import Path
from typing import get_args

import numpy as np
import pytest
import torch

from contract.errors import ConfigError
from datamodules.image_datasets import IMAGE_DATASETS, ImageDatasetName
from datamodules.image_recipe import TrainRecipe
from datamodules.images import ImageDataModule


def test_registry_matches_literal() -> None:
    assert set(IMAGE_DATASETS) | {"folder"} == set(get_args(ImageDatasetName))


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


def test_recipe_off_builds_no_timm_transform() -> None:
    dm = ImageDataModule(seed=0)
    assert not TrainRecipe().on
    assert dm._dataset("train").recipe is None and dm._dataset("val").transform is None


def test_recipe_augments_training_images_only() -> None:
    recipe = TrainRecipe(rand_augment="rand-m9-mstd0.5-inc1", color_jitter=0.4, random_erasing=0.5)
    dm, plain = ImageDataModule(seed=0, recipe=recipe), ImageDataModule(seed=0)
    train, reference = dm._dataset("train"), plain._dataset("train")
    torch.manual_seed(0)
    random.seed(0)
    images = torch.stack([train[i][0] for i in range(64)])
    assert images.shape == (64, 1, 8, 8) and images.dtype == torch.float32
    expected = torch.stack([reference[i][0] for i in range(64)])
    changed = ~torch.isclose(images, expected, atol=1e-2).flatten(1).all(1)
    assert changed.float().mean() > 0.5  # RandAugment's two operations and erasing reach most images
    # the normalisation is the dataset's: an image left alone reads as before (up to the 8-bit rescale)
    torch.testing.assert_close(images[~changed], expected[~changed], atol=1e-2, rtol=0)
    assert [train[i][1] for i in range(8)] == [reference[i][1] for i in range(8)]
    val = dm._dataset("val")
    torch.testing.assert_close(val[0][0], plain._dataset("val")[0][0], atol=0, rtol=0)


def _first_batches(dm: ImageDataModule, seed: int, n: int = 2) -> list[dict]:
    """The first `n` training batches after seeding the global RNGs as a run's `seed_everything` does."""
    import lightning.pytorch as pl

    pl.seed_everything(seed, verbose=False)
    batches = iter(dm.train_dataloader())
    return [next(batches) for _ in range(n)]


def test_recipe_batches_differ_from_clean_ones_and_repeat_under_a_seed() -> None:
    """The recipe's training batches (RandAugment + random erasing, through the loader) are other pixels
    than the clean batches of the same images, the same pixels again under the same seed, and other
    draws under another seed (the images and their order are the DataModule's seed's)."""
    recipe = TrainRecipe(rand_augment="rand-m9-mstd0.5-inc1", random_erasing=0.25)
    dm, plain = ImageDataModule(seed=0, batch_size=64, recipe=recipe), ImageDataModule(seed=0, batch_size=64)
    first, again, other = _first_batches(dm, 0), _first_batches(dm, 0), _first_batches(dm, 1)
    clean = _first_batches(plain, 0)
    for a, b, o, c in zip(first, again, other, clean):
        assert torch.equal(a["labels"], c["labels"]) and torch.equal(o["labels"], c["labels"])
        changed = ~torch.isclose(a["images"], c["images"], atol=1e-2).flatten(1).all(1)
        assert changed.float().mean() > 0.5  # most images augmented
        torch.testing.assert_close(a["images"], b["images"], atol=0, rtol=0)  # reproducible
        assert not torch.equal(a["images"], o["images"])  # the draws follow the run's seed


def test_posterize_to_zero_bits_gives_black() -> None:
    """timm's 'inc1' posterize reaches 0 bits, which Pillow 13 refuses; the recipe keeps Pillow's old black."""
    from PIL import Image

    from datamodules.image_recipe import _posterize

    image = Image.fromarray(np.full((4, 4), 200, dtype=np.uint8))
    assert np.asarray(_posterize(image, 0)).max() == 0
    assert np.asarray(_posterize(image, 4)).max() == 192


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"rand_augment": "m9"}, r"recipe.rand_augment='m9'.*rand-m9-mstd0.5-inc1"),
        ({"color_jitter": -0.1}, r"recipe.color_jitter=-0.1"),
        ({"random_erasing": 1.5}, r"recipe.random_erasing=1.5"),
    ],
)
def test_recipe_is_validated(fields: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        TrainRecipe(**fields)


def test_eval_image_sizes_give_a_loader_per_side() -> None:
    dm = ImageDataModule(seed=0, batch_size=300, eval_image_sizes=[16, 12])
    assert dm.eval_sides == [8, 16, 12]  # the training side first
    loaders = dm.val_dataloader()
    batches = [next(iter(loader)) for loader in loaders]
    assert [b["images"].shape[-1] for b in batches] == [8, 16, 12]
    assert all(torch.equal(b["labels"], batches[0]["labels"]) for b in batches)  # the same images
    assert [next(iter(loader))["images"].shape[-1] for loader in dm.test_dataloader()] == [8, 16, 12]
    assert not isinstance(ImageDataModule(seed=0).val_dataloader(), list)
    with pytest.raises(ConfigError, match=r"eval_image_sizes=\[8, 0\]"):
        ImageDataModule(eval_image_sizes=[8, 0])
