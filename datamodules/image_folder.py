"""A user's own images: train / val / test folders of class subfolders (``train/cat/001.jpg``), found as torchvision's
``ImageFolder`` finds them and decoded only when a batch needs them, so a dataset of any size trains in bounded
memory."""

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor
from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset
from torchvision.transforms import v2

from datamodules.image_datasets import ImageArrays, ImageSpec
from datamodules.image_files import read_image

# ImageNet's channel statistics: what timm and torchvision normalise photographs with
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class ImageFileArray:
    """Images as a sequence of uint8 (C, side, side) tensors, each read from its file when indexed; indexing with
    a tensor of indices gives the sub-array (as a tensor of images would)."""

    paths: tuple[str, ...]
    spec: ImageSpec

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int | Tensor | Sequence[int]) -> "Tensor | ImageFileArray":
        if isinstance(index, int) or (isinstance(index, Tensor) and index.ndim == 0):
            return read_image(Path(self.paths[int(index)]), self.spec)
        return ImageFileArray(tuple(self.paths[i] for i in torch.as_tensor(index).tolist()), self.spec)


def classes(train_dir: str) -> list[str]:
    """The class names (subfolder names, sorted): the labels' order."""
    try:
        return find_classes(train_dir)[0]
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"data.train_dir {train_dir} has no class subfolders ({e}); put each class's images in a subfolder "
            f"named after it: {train_dir}/<class>/<image>.jpg"
        ) from e


def folder_spec(train_dir: str, side: int) -> ImageSpec:
    """A folder dataset's spec: its classes, RGB at ``side`` x ``side``, ImageNet normalisation, and random
    resized crops with flips as the augmentation (``augment: true``)."""
    return ImageSpec(
        len(classes(train_dir)), side, 3, 255, IMAGENET_MEAN, IMAGENET_STD, load=lambda *_: None,  # type: ignore[arg-type]
        augment=lambda: v2.Compose([v2.RandomResizedCrop(side, scale=(0.35, 1.0), antialias=True),
                                    v2.RandomHorizontalFlip()]),
        classes=tuple(classes(train_dir)),
    )  # fmt: skip


def _samples(folder: str, class_to_idx: dict[str, int], split: str) -> list[tuple[str, int]]:
    if not Path(folder).is_dir():
        raise FileNotFoundError(f"data.{split}_dir {folder} does not exist; check the path")
    extra = sorted(set(find_classes(folder)[0]) - set(class_to_idx)) if split != "train" else []
    if extra:
        raise ValueError(f"data.{split}_dir {folder} has classes the training folder lacks: {extra}")
    try:
        return make_dataset(folder, class_to_idx, extensions=IMG_EXTENSIONS, allow_empty=split != "train")
    except FileNotFoundError as e:
        raise FileNotFoundError(f"data.{split}_dir {folder}: {e}; every class subfolder needs an image") from e


def load_folders(dirs: dict[str, str | None], spec: ImageSpec) -> ImageArrays:
    """The folders' images and labels: the training folder's (then the validation folder's, from ``val_start``) as
    ``train``, the test folder's as ``test``; the checksum is of every file's path and size (hashing each image's
    bytes would read the whole dataset at every run)."""
    class_to_idx = {name: i for i, name in enumerate(spec.classes)}
    found = {split: _samples(folder, class_to_idx, split) for split, folder in dirs.items() if folder}
    digest = hashlib.sha256()
    for split, samples in found.items():
        for path, label in samples:
            name = Path(path).relative_to(dirs[split])  # type: ignore[arg-type]
            digest.update(f"{split}\t{name}\t{Path(path).stat().st_size}\t{label}\n".encode())

    def arrays(samples: list[tuple[str, int]]) -> tuple[ImageFileArray, Tensor]:
        return ImageFileArray(tuple(p for p, _ in samples), spec), torch.tensor([y for _, y in samples])

    test = arrays(found["test"]) if "test" in found else None
    val_start = len(found["train"]) if "val" in found else None
    train = arrays(found["train"] + found.get("val", []))
    return ImageArrays(train, test, val_start=val_start, sha256=digest.hexdigest())  # type: ignore[arg-type]
