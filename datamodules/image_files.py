"""Image files for `cli.py predict`: the images a `predict_file` names, each read as the dataset's
uint8 (C, H, W), with an error naming the file for one that cannot be read."""

from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from datamodules.image_datasets import ImageSpec

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
