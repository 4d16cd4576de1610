"""Image classification: scikit-learn's bundled digits (offline) and torchvision datasets."""

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import torch
from PIL import Image
from sklearn.model_selection import train_test_split
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Subset, default_collate
from torchvision import datasets as tv_datasets
from torchvision.transforms import v2

from contract.errors import ConfigError
from datamodules.base import SuiteDataModule
from datamodules.predict_inputs import DEFAULT_INPUTS

ImageDatasetName = Literal["digits", "cifar10", "mnist", "fashion_mnist"]


@dataclass(frozen=True)
class ImageArrays:
    """Raw images as uint8 (N, C, H, W) with integer labels; ``test`` is None without an official split."""

    train: tuple[Tensor, Tensor]
    test: tuple[Tensor, Tensor] | None


def _load_digits(data_dir: str | None, cache_dir: str) -> ImageArrays:
    """scikit-learn's 1,797 8x8 digits, shipped inside its wheel; pixel values 0..16."""
    from sklearn.datasets import load_digits

    d = load_digits()
    images = torch.from_numpy(d.images.astype(np.uint8)).unsqueeze(1)  # values are integers 0..16
    return ImageArrays((images, torch.from_numpy(d.target).long()), None)


def _torchvision(cls: type, name: str) -> Callable[[str | None, str], ImageArrays]:
    """A loader for a torchvision dataset: ``data_dir`` as its root (no download) or ``cache_dir``."""

    def load(data_dir: str | None, cache_dir: str) -> ImageArrays:
        root = Path(data_dir or cache_dir).expanduser()
        try:
            splits = [cls(str(root), train=train, download=data_dir is None) for train in (True, False)]
        except RuntimeError as e:  # torchvision's "Dataset not found" when download=False
            raise FileNotFoundError(
                f"{name} not found under data_dir {root} ({e}). Leave data_dir unset to download it into "
                f"cache_dir, or run `torchvision.datasets.{cls.__name__}('{root}', download=True)`."
            ) from e

        def arrays(ds) -> tuple[Tensor, Tensor]:
            x = torch.as_tensor(ds.data)
            x = x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2)  # grey (N,H,W) / RGB (N,H,W,C)
            return x.contiguous(), torch.as_tensor(ds.targets).long()

        return ImageArrays(arrays(splits[0]), arrays(splits[1]))

    return load


@dataclass(frozen=True)
class ImageSpec:
    """What a model needs to know before any data is loaded, and how to load and normalise it."""

    num_classes: int
    image_size: int
    in_channels: int
    max_value: int  # raw pixel maximum: scales pixels to [0, 1]
    mean: tuple[float, ...]  # per channel, after scaling
    std: tuple[float, ...]
    load: Callable[[str | None, str], ImageArrays]
    augment: Callable[[], v2.Transform] | None = None  # train-time augmentation, when augment=True
    classes: tuple[str, ...] = ()  # class names by label; empty: the labels' numbers


IMAGE_DATASETS: dict[ImageDatasetName, ImageSpec] = {
    "digits": ImageSpec(10, 8, 1, 16, (0.3053,), (0.3760,), _load_digits),
    "cifar10": ImageSpec(
        10, 32, 3, 255, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616),
        _torchvision(tv_datasets.CIFAR10, "cifar10"),
        lambda: v2.Compose([v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()]),
        classes=("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"),
    ),
    "mnist": ImageSpec(10, 28, 1, 255, (0.1307,), (0.3081,), _torchvision(tv_datasets.MNIST, "mnist")),
    "fashion_mnist": ImageSpec(
        10, 28, 1, 255, (0.2860,), (0.3530,), _torchvision(tv_datasets.FashionMNIST, "fashion_mnist"),
        classes=("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                 "Ankle boot"),
    ),
}
assert set(IMAGE_DATASETS) == set(get_args(ImageDatasetName))

DIGITS_TEST_FRACTION = 0.15  # digits has no official test split: a stratified one is held out


@dataclass(frozen=True)
class TrainRecipe:
    """Training-image augmentations of the DeiT recipe, through timm's transform factory
    (`timm.data.create_transform`), applied after the dataset's own crop and flip (`augment`). Each
    is off by default; with all off, no timm transform runs and the images are those of before.

    Args:
        rand_augment: a timm RandAugment policy string (Cubuk et al. 2020), e.g. `rand-m9-mstd0.5-inc1`
            (DeiT): magnitude 9, its std 0.5, increasing severity; None: off.
        color_jitter: brightness, contrast and saturation jitter strength; 0: off. timm leaves it out
            when `rand_augment` is set (RandAugment has its own colour operations).
        random_erasing: probability of erasing a random box of a normalised training image with
            per-pixel noise (Zhong et al. 2020; DeiT: 0.25); 0: off.
    """

    rand_augment: str | None = None
    color_jitter: float = 0.0
    random_erasing: float = 0.0

    def __post_init__(self) -> None:
        if self.rand_augment is not None and not self.rand_augment.startswith("rand-"):
            raise ConfigError(
                f"recipe.rand_augment={self.rand_augment!r} is not a RandAugment policy; give timm's "
                "'rand-m<magnitude>[-mstd<std>][-n<ops>][-inc1]', e.g. 'rand-m9-mstd0.5-inc1'"
            )
        if self.color_jitter < 0:
            raise ConfigError(f"recipe.color_jitter={self.color_jitter} must be 0 (off) or more (timm: 0.4)")
        if not 0.0 <= self.random_erasing <= 1.0:
            raise ConfigError(f"recipe.random_erasing={self.random_erasing} must be a probability in [0, 1]")

    @property
    def on(self) -> bool:
        return self.rand_augment is not None or self.color_jitter > 0 or self.random_erasing > 0


def _posterize(img: Image.Image, bits_to_keep: int, **kwargs) -> Image.Image:
    """timm's posterize, with 0 bits kept giving black as Pillow < 13 did: Pillow 13 refuses 0, which
    timm's increasing ('inc1') policies reach at magnitude 10 (a `mstd` draw from m9 gets there)."""
    from timm.data import auto_augment

    return img.point(lambda _: 0) if bits_to_keep == 0 else auto_augment.posterize(img, bits_to_keep, **kwargs)


class RecipeTransform:
    """uint8 (C, H, W) → normalised float (C, H, W) through timm's training transform, without its
    crop and flips (the dataset's `augment` keeps those). timm's colour operations work on 8-bit PIL
    images, so pixels are rescaled to 0..255 first; its normalisation is then the dataset's."""

    def __init__(self, spec: ImageSpec, recipe: TrainRecipe) -> None:
        from timm.data import create_transform  # imported on use: `import timm` takes seconds

        _, self.colour, self.finish = create_transform(
            (spec.in_channels, spec.image_size, spec.image_size),
            is_training=True,
            auto_augment=recipe.rand_augment,
            color_jitter=recipe.color_jitter or None,
            re_prob=recipe.random_erasing,
            re_mode="pixel",
            mean=spec.mean,
            std=spec.std,
            separate=True,
        )
        from timm.data import auto_augment

        for transform in self.colour.transforms:
            for op in getattr(transform, "ops", ()):  # RandAugment's operations
                if op.aug_fn is auto_augment.posterize:
                    op.aug_fn = _posterize
        self.to_255 = 255.0 / spec.max_value

    def __call__(self, x: Tensor) -> Tensor:
        image = v2.functional.to_pil_image((x.float() * self.to_255).round().to(torch.uint8))
        return self.finish(self.colour(image))


class ImageTensors(Dataset[tuple[Tensor, int]]):
    """uint8 images → normalised float (C, H, W), optionally augmented; items are (image, label).

    Args:
        images: uint8 (N, C, H, W).
        labels: long (N,).
        spec: the dataset's scale and normalisation.
        transform: augmentation (or resizing) applied to the uint8 image first.
        recipe: timm's augmentations after `transform`; it normalises the image itself.
    """

    def __init__(
        self,
        images: Tensor,
        labels: Tensor,
        spec: ImageSpec,
        transform: v2.Transform | None = None,
        recipe: RecipeTransform | None = None,
    ) -> None:
        self.images, self.labels, self.transform, self.recipe = images, labels, transform, recipe
        self.scale = 1.0 / spec.max_value
        self.mean = torch.tensor(spec.mean).view(-1, 1, 1)
        self.std = torch.tensor(spec.std).view(-1, 1, 1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[Tensor, int]:
        x = self.images[i]
        if self.transform is not None:
            x = self.transform(x)
        if self.recipe is not None:
            return self.recipe(x), int(self.labels[i])
        return (x.float() * self.scale - self.mean) / self.std, int(self.labels[i])


def collate_images(batch: Sequence[tuple[Tensor, int]]) -> dict[str, Tensor]:
    """torchvision-style (image, label) tuples → ``{"images": (B, C, H, W), "labels": (B,)}``."""
    images, labels = default_collate(batch)
    return {"images": images, "labels": labels}


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")


def image_paths(path: str | Path) -> list[Path]:
    """``path`` itself, or the files of the folder ``path`` with an image suffix (:data:`IMAGE_SUFFIXES`), sorted."""
    path = Path(path)
    if path.is_dir():
        files = sorted(f for f in path.iterdir() if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise ValueError(f"predict_file {path} is a folder with no image ({', '.join(IMAGE_SUFFIXES)}) in it")
        return files
    if not path.is_file():
        raise FileNotFoundError(f"predict_file {path} does not exist; give an image or a folder of images")
    return [path]


def read_image(path: Path, spec: ImageSpec) -> Tensor:
    """An image file as the dataset's uint8 (C, H, W): grey or RGB as its channels, resized to its side."""
    try:
        with Image.open(path) as image:
            image = image.convert("L" if spec.in_channels == 1 else "RGB")
            image = image.resize((spec.image_size, spec.image_size), Image.Resampling.BILINEAR)
    except (OSError, ValueError) as e:  # PIL's UnidentifiedImageError is an OSError
        raise ValueError(f"{path}: not a readable image ({e}); remove it or convert it to PNG") from e
    array = np.asarray(image, dtype=np.uint8).reshape(spec.image_size, spec.image_size, spec.in_channels)
    return torch.from_numpy(array.copy()).permute(2, 0, 1)


class NamedImages(Dataset[dict]):
    """Items ``{"images", "labels", "index", "input"}`` of an :class:`ImageTensors` and its images' names."""

    def __init__(self, images: Dataset, names: Sequence[str]) -> None:
        self.images, self.names = images, list(names)

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, i: int) -> dict:
        image, label = self.images[i]
        return {"images": image, "labels": label, "index": i, "input": self.names[i]}


def _stratified(labels: Tensor, indices: np.ndarray, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Split ``indices`` into (rest, held out ``size``), class proportions kept."""
    rest, held = train_test_split(indices, test_size=size, stratify=labels[indices].numpy(), random_state=seed)
    return np.sort(rest), np.sort(held)


class ImageDataModule(SuiteDataModule):
    """Image classification; batches are ``{"images": FloatTensor(B, C, H, W), "labels": LongTensor(B)}``.

    Validation is a seeded stratified ``val_fraction`` of the training data. ``digits`` has no
    official test split, so a stratified 15% is held out as test first: 1,257 / 270 / 270 images by
    default. ``seed`` seeds the splits and the shuffling. torchvision datasets download into
    ``cache_dir`` unless ``data_dir``, a torchvision root holding the dataset, is given.

    ``predict_dataloader`` (``cli.py predict``) adds ``index`` and ``input`` (the image's name) to the batches;
    ``labels`` is -1 for an image file.

    Args:
        dataset: ``digits`` (offline) or a torchvision dataset.
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
        **kwargs: ``seed``, ``num_workers``, ``data_dir``, ``cache_dir``: see :class:`SuiteDataModule`.
    """

    def __init__(
        self,
        dataset: ImageDatasetName = "digits",
        batch_size: int = 64,
        augment: bool = True,
        val_fraction: float = 0.15,
        predict_file: str | None = None,
        recipe: TrainRecipe = TrainRecipe(),
        eval_image_sizes: list[int] | None = None,
        **kwargs,
    ) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        self.dataset, self.augment, self.val_fraction = dataset, augment, val_fraction
        self.predict_file, self.recipe = predict_file, recipe
        self.spec = IMAGE_DATASETS[dataset]
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
        return self.spec.load(self.data_dir, self.cache_dir)

    @cached_property
    def splits(self) -> dict[str, np.ndarray]:
        """Indices into the official train set (train, val, and test for digits) or test set (test)."""
        x, y = self._arrays.train
        indices = np.arange(len(y))
        if self._arrays.test is None:
            indices, test = _stratified(y, indices, round(DIGITS_TEST_FRACTION * len(y)), self.seed)
        else:
            test = np.arange(len(self._arrays.test[1]))
        train, val = _stratified(y, indices, round(self.val_fraction * len(y)), self.seed)
        return {"train": train, "val": val, "test": test}

    @cached_property
    def data_checksum(self) -> str:
        """SHA-256 (hex) of the raw images and labels (train, then test)."""
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
