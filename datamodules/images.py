"""Image classification on scikit-learn's bundled digits (offline) and torchvision datasets: the
DataModule that splits a dataset of `image_datasets` and serves its loaders, with the training recipe
of `image_recipe` on training images and the files of `image_files` for `cli.py predict`."""

import hashlib
from dataclasses import replace
from functools import cached_property

import numpy as np
import torch
from jsonargparse.typing import PositiveInt
from torch import Tensor
from torch.utils.data import DataLoader, Subset
from torchvision.transforms import v2

from contract.errors import ConfigError
from datamodules.base import SuiteDataModule, check_own_data
from datamodules.image_datasets import (
    FOLDER,
    IMAGE_DATASETS,
    ImageArrays,
    ImageDatasetName,
    ImageTensors,
    NamedImages,
    collate_images,
)
from datamodules.image_files import image_paths, read_image
from datamodules.image_folder import folder_spec, load_folders
from datamodules.image_recipe import RecipeTransform, TrainRecipe
from datamodules.predict_inputs import DEFAULT_INPUTS
from datamodules.sampling import TEST_SPLIT_SEED

DIGITS_TEST_FRACTION = 0.15  # digits has no official test split: a stratified one is held out


def _stratified(labels: Tensor, indices: np.ndarray, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Split ``indices`` into (rest, held out ``size``), class proportions kept."""
    # imported here: scikit-learn imports pandas when it is installed (`datasets` brings it), and pandas starts
    # pyarrow's threads, which would keep a sweep's warm process (it imports the DataModules) from forking
    from sklearn.model_selection import train_test_split

    rest, held = train_test_split(indices, test_size=size, stratify=labels[indices].numpy(), random_state=seed)
    return np.sort(rest), np.sort(held)


class ImageDataModule(SuiteDataModule):
    """Image classification; batches are ``{"images": FloatTensor(B, C, H, W), "labels": LongTensor(B)}``.

    Validation is a seeded stratified ``val_fraction`` of the training data. ``digits`` has no
    official test split, so a stratified 15% is held out as test first, the same for every seed
    (``TEST_SPLIT_SEED``): 1,257 / 270 / 270 images by default. ``seed`` seeds validation and the
    shuffling. torchvision datasets download into ``cache_dir`` unless ``data_dir``, a torchvision root
    holding the dataset, is given.

    ``predict_dataloader`` (``cli.py predict``) adds ``index`` and ``input`` (the image's name) to the batches;
    ``labels`` is -1 for an image file.

    ``dataset: folder`` trains on the user's own images: ``train_dir`` (and optionally ``val_dir``, ``test_dir``),
    each a folder of class subfolders as torchvision's ``ImageFolder`` reads them (``train/cat/001.jpg``), decoded
    as RGB at ``image_side`` when a batch needs them; without ``val_dir`` (``test_dir``), a stratified
    ``val_fraction`` (15%) of the training images is held out, as for digits.

    Args:
        dataset: ``digits`` (offline), a torchvision dataset, or ``folder`` (the ``*_dir`` below).
        batch_size: images per batch.
        augment: random crop (padding 4) and horizontal flip on training images; datasets without an
            augmentation in :data:`IMAGE_DATASETS` (all but cifar10) ignore it.
        recipe: timm's RandAugment, colour jitter and random erasing on training images
            (:class:`TrainRecipe`: ``--data.recipe.rand_augment rand-m9-mstd0.5-inc1``); off by default.
        eval_image_sizes: image sides at which validation and test are also run, each its own dataloader
            (images resized bilinearly, antialiased): the resolution axis, e.g. ``[32, 48, 64]`` on
            CIFAR-10 logs ``val/acc@32``, ``val/acc@48``, ``val/acc@64``. The training side is always
            the first loader, whether listed or not; unset: one loader at the training side.
        val_fraction: fraction held out for validation (of all images for digits, of the official
            training set otherwise).
        predict_file: an image, or a folder of images (the files with an image suffix), for ``cli.py predict``:
            converted to the dataset's channels, resized to its side, pixel values read as the dataset's
            (digits and MNIST: bright strokes on black); unset: the first 4 test images.
        train_dir: ``dataset: folder``: the training images' folder of class subfolders.
        val_dir: the validation images (the same class subfolders); unset: held out of the training images.
        test_dir: the test images; unset: held out of the training images.
        image_side: ``dataset: folder``: images are resized to ``image_side`` x ``image_side``.
        **kwargs: ``seed``, ``num_workers``, ``data_dir``, ``cache_dir``: see :class:`SuiteDataModule`.
    """

    def __init__(
        self,
        dataset: ImageDatasetName = "digits",
        batch_size: PositiveInt = 64,
        augment: bool = True,
        val_fraction: float = 0.15,
        predict_file: str | None = None,
        recipe: TrainRecipe = TrainRecipe(),
        eval_image_sizes: list[int] | None = None,
        train_dir: str | None = None,
        val_dir: str | None = None,
        test_dir: str | None = None,
        image_side: PositiveInt = 32,
        **kwargs,
    ) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        self.dataset, self.augment, self.val_fraction = dataset, augment, val_fraction
        self.predict_file, self.recipe = predict_file, recipe
        self.dirs = {"train": train_dir, "val": val_dir, "test": test_dir}
        paths = {f"{split}_dir": folder for split, folder in self.dirs.items()}
        check_own_data("dataset", dataset, FOLDER, paths, "a folder of class subfolders of images")
        self.spec = folder_spec(train_dir, image_side) if dataset == FOLDER else IMAGE_DATASETS[dataset]
        if eval_image_sizes is not None and any(side < 1 for side in eval_image_sizes):
            raise ConfigError(f"data.eval_image_sizes={eval_image_sizes}: every side must be a positive integer")
        self.eval_image_sizes = list(eval_image_sizes) if eval_image_sizes else None

    @property
    def num_classes(self) -> int:
        return self.spec.num_classes

    @property
    def image_size(self) -> int:
        return self.spec.image_size

    @property
    def in_channels(self) -> int:
        return self.spec.in_channels

    @property
    def eval_sides(self) -> list[int]:
        """The side of each evaluation dataloader, the training side first."""
        return [self.image_size, *(side for side in self.eval_image_sizes or () if side != self.image_size)]

    @property
    def class_names(self) -> tuple[str, ...]:
        """Each label's name (digits and MNIST: the digit)."""
        return self.spec.classes or tuple(map(str, range(self.num_classes)))

    @cached_property
    def _arrays(self) -> ImageArrays:
        if self.dataset == FOLDER:
            return load_folders(self.dirs, self.spec)
        return self.spec.load(self.data_dir, self.cache_dir)

    @cached_property
    def splits(self) -> dict[str, np.ndarray]:
        """Indices into the official train set (train, val, and test for digits) or test set (test)."""
        x, y = self._arrays.train
        val_start = self._arrays.val_start
        indices = np.arange(len(y) if val_start is None else val_start)
        if self._arrays.test is None:
            indices, test = _stratified(y, indices, round(DIGITS_TEST_FRACTION * len(indices)), TEST_SPLIT_SEED)
        else:
            test = np.arange(len(self._arrays.test[1]))
        if val_start is not None:  # an official validation split
            return {"train": indices, "val": np.arange(val_start, len(y)), "test": test}
        train, val = _stratified(y, indices, round(self.val_fraction * len(y)), self.seed)
        return {"train": train, "val": val, "test": test}

    @cached_property
    def data_checksum(self) -> str:
        """SHA-256 (hex) of the raw images and labels (train, then test); a folder's: of its files' paths and sizes."""
        if self._arrays.sha256 is not None:
            return self._arrays.sha256
        digest = hashlib.sha256()
        for x, y in filter(None, (self._arrays.train, self._arrays.test)):
            digest.update(x.numpy().tobytes())
            digest.update(y.numpy().astype(np.int64).tobytes())
        return digest.hexdigest()

    def prepare_data(self) -> None:
        _ = self._arrays

    def _dataset(self, split: str, side: int | None = None) -> ImageTensors:
        from_test = split == "test" and self._arrays.test is not None
        x, y = self._arrays.test if from_test else self._arrays.train  # type: ignore[misc]
        idx = torch.from_numpy(self.splits[split])
        if split != "train":
            resize = v2.Resize((side, side), antialias=True) if side and side != self.image_size else None
            return ImageTensors(x[idx], y[idx], self.spec, resize)
        augment = self.spec.augment() if self.augment and self.spec.augment else None
        recipe = RecipeTransform(self.spec, self.recipe) if self.recipe.on else None
        return ImageTensors(x[idx], y[idx], self.spec, augment, recipe)

    def train_dataloader(self) -> DataLoader:
        return self._epoch_loader(self._dataset("train"), shuffle=True, collate_fn=collate_images)

    def _eval_loaders(self, split: str) -> DataLoader | list[DataLoader]:
        if not self.eval_image_sizes:  # one loader, as before the resolution axis
            return self._epoch_loader(self._dataset(split), shuffle=False, collate_fn=collate_images)
        return [
            self._epoch_loader(self._dataset(split, side), shuffle=False, collate_fn=collate_images)
            for side in self.eval_sides
        ]

    def val_dataloader(self) -> DataLoader | list[DataLoader]:
        return self._eval_loaders("val")

    def test_dataloader(self) -> DataLoader | list[DataLoader]:
        return self._eval_loaders("test")

    def predict_dataloader(self) -> DataLoader:
        if self.predict_file:
            paths = image_paths(self.predict_file)
            images = torch.stack([read_image(p, self.spec) for p in paths])  # all read first: a bad file fails early
            # files hold 0..255 whatever the dataset's raw range: scale by 255, then the dataset's normalisation
            dataset = ImageTensors(images, torch.full((len(paths),), -1), replace(self.spec, max_value=255))
            named = NamedImages(dataset, [str(p) for p in paths])
        else:
            n = min(DEFAULT_INPUTS, len(self.splits["test"]))
            named = NamedImages(Subset(self._dataset("test"), range(n)), [f"test[{i}]" for i in range(n)])
        return self._eval_loader(named)
