"""The image datasets and their items: a registry of what each dataset is (classes, side, channels,
pixel range, normalisation, loader, augmentation) and the map-style datasets that turn its raw
uint8 images into normalised (image, label) items."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, default_collate
from torchvision import datasets as tv_datasets
from torchvision.transforms import v2

# `folder`: the user's own class-subfolder tree (`datamodules.image_folder`)
ImageDatasetName = Literal["digits", "cifar10", "mnist", "fashion_mnist", "folder"]
FOLDER: ImageDatasetName = "folder"


@dataclass(frozen=True)
class ImageArrays:
    """Raw images as uint8 (N, C, H, W) (or a sequence of them read from files) with integer labels; ``test`` is
    None without an official split."""

    train: tuple[Tensor, Tensor]
    test: tuple[Tensor, Tensor] | None
    val_start: int | None = None  # an official validation split: ``train``'s images from this index on
    sha256: str | None = None  # of the data, when the images are not in memory to hash


def _load_digits(data_dir: str | None, cache_dir: str) -> ImageArrays:
    """scikit-learn's 1,797 8x8 digits, shipped inside its wheel; pixel values 0..16."""
    from sklearn.datasets import load_digits

    d = load_digits()
    images = torch.from_numpy(d.images.astype(np.uint8)).unsqueeze(1)  # values are integers 0..16
    return ImageArrays((images, torch.from_numpy(d.target).long()), None)


def _torchvision_loader(cls: type, name: str) -> Callable[[str | None, str], ImageArrays]:
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
        10,
        32,
        3,
        255,
        (0.4914, 0.4822, 0.4465),
        (0.2470, 0.2435, 0.2616),
        _torchvision_loader(tv_datasets.CIFAR10, "cifar10"),
        lambda: v2.Compose([v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()]),
        classes=("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"),
    ),
    "mnist": ImageSpec(10, 28, 1, 255, (0.1307,), (0.3081,), _torchvision_loader(tv_datasets.MNIST, "mnist")),
    "fashion_mnist": ImageSpec(
        10,
        28,
        1,
        255,
        (0.2860,),
        (0.3530,),
        _torchvision_loader(tv_datasets.FashionMNIST, "fashion_mnist"),
        classes=(
            "T-shirt/top",
            "Trouser",
            "Pullover",
            "Dress",
            "Coat",
            "Sandal",
            "Shirt",
            "Sneaker",
            "Bag",
            "Ankle boot",
        ),
    ),
}
assert set(IMAGE_DATASETS) | {FOLDER} == set(get_args(ImageDatasetName))


class ImageTensors(Dataset[tuple[Tensor, int]]):
    """uint8 images → normalised float (C, H, W), optionally augmented; items are (image, label).

    Args:
        images: uint8 (N, C, H, W).
        labels: long (N,).
        spec: the dataset's scale and normalisation.
        transform: augmentation (or resizing) applied to the uint8 image first.
        recipe: timm's augmentations after `transform` (`image_recipe.RecipeTransform`); it normalises
            the image itself.
    """

    def __init__(
        self,
        images: Tensor,
        labels: Tensor,
        spec: ImageSpec,
        transform: v2.Transform | None = None,
        recipe: Callable[[Tensor], Tensor] | None = None,
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


class NamedImages(Dataset[dict]):
    """Items ``{"images", "labels", "index", "input"}`` of an :class:`ImageTensors` and its images' names."""

    def __init__(self, images: Dataset, names: Sequence[str]) -> None:
        self.images, self.names = images, list(names)

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, i: int) -> dict:
        image, label = self.images[i]
        return {"images": image, "labels": label, "index": i, "input": self.names[i]}
