"""The ViT training recipe's image augmentations (DeiT: RandAugment, colour jitter, random erasing),
through timm's transform factory. timm is imported only when a recipe is on: `import timm` takes
seconds, and most runs train without it."""

from dataclasses import dataclass

import torch
from PIL import Image
from torch import Tensor
from torchvision.transforms import v2

from contract.errors import ConfigError
from datamodules.image_datasets import ImageSpec


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
