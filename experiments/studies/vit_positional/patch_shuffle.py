"""Are a trained ViT's predictions invariant to shuffling its patches? (vit_positional study)

Without positional information a ViT sees a set of patches, so permuting the patches (the same
permutation for every image) must leave its predictions unchanged; with positions it must not.

    python -m experiments.studies.vit_positional.patch_shuffle experiments/studies/vit_positional/results/vit_positional
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from datamodules import ImageDataModule
from lit_modules import ImageClassifier


def shuffle_patches(images: torch.Tensor, patch: int, perm: torch.Tensor) -> torch.Tensor:
    B, C, H, W = images.shape
    g = H // patch
    tiles = images.view(B, C, g, patch, g, patch).permute(0, 2, 4, 1, 3, 5).reshape(B, g * g, C, patch, patch)
    tiles = tiles[:, perm].view(B, g, g, C, patch, patch).permute(0, 3, 1, 4, 2, 5)
    return tiles.reshape(B, C, H, W)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path)
    args = parser.parse_args(argv)
    print("| cell | seed | val acc | val acc, patches shuffled | predictions unchanged |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for ckpt in sorted(args.sweep_dir.glob("*/seed*/checkpoints/last.ckpt")):
        seed = int(ckpt.parents[1].name.removeprefix("seed"))
        # each run's own validation split (the sweep seeds the split with the run's seed)
        batch = next(iter(ImageDataModule(dataset="digits", batch_size=512, seed=seed).val_dataloader()))
        model = ImageClassifier.load_from_checkpoint(ckpt, map_location="cpu").eval()
        perm = torch.randperm(
            model.model.num_tokens - (model.model.cls is not None), generator=torch.Generator().manual_seed(0)
        )
        with torch.no_grad():
            pred = model.model(batch["images"]).argmax(-1)
            shuffled = model.model(shuffle_patches(batch["images"], model.hparams.patch_size, perm)).argmax(-1)
        acc = (pred == batch["labels"]).float().mean().item()
        acc_shuffled = (shuffled == batch["labels"]).float().mean().item()
        same = (pred == shuffled).float().mean().item()
        print(f"| {ckpt.parents[2].name} | {seed} | {acc:.3f} | {acc_shuffled:.3f} | {same:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
