"""`dataset: folder`: the user's own images in class subfolders (here scikit-learn's digits written out as PNG
files), read lazily with the recipe's transforms, and the folder errors as one-line messages."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from contract.run_record import read_run_record
from datamodules.image_folder import ImageFileArray
from datamodules.image_recipe import TrainRecipe
from datamodules.images import ImageDataModule

ROOT = Path(__file__).resolve().parents[2]
CLASSES = ("0", "1", "2")  # subfolder names: sorted, they are the labels


def write_digits(folder: Path, per_class: int, offset: int = 0) -> None:
    """``per_class`` digits images of 0, 1 and 2 as 16x16 RGB PNG files in class subfolders."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    for label, name in enumerate(CLASSES):
        (folder / name).mkdir(parents=True, exist_ok=True)
        images = digits.images[digits.target == label][offset : offset + per_class]
        for i, image in enumerate(images):
            pixels = np.kron(image * 15, np.ones((2, 2))).astype(np.uint8)
            Image.fromarray(np.stack([pixels] * 3, axis=-1)).save(folder / name / f"{i:03d}.png")


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("images")
    write_digits(root / "train", 40)
    write_digits(root / "val", 10, offset=40)
    return root


def test_class_subfolders_become_labels_and_images_are_read_when_needed(folders) -> None:
    dm = ImageDataModule("folder", train_dir=str(folders / "train"), val_dir=str(folders / "val"), image_side=16,
                         batch_size=8, augment=False)  # fmt: skip
    assert (dm.num_classes, dm.image_size, dm.in_channels, dm.class_names) == (3, 16, 3, CLASSES)
    assert isinstance(dm._arrays.train[0], ImageFileArray)  # paths, not pixels, until a batch is drawn
    assert {k: len(v) for k, v in dm.splits.items()} == {"train": 102, "val": 30, "test": 18}
    val = dm._dataset("val")
    image, label = val[0]
    assert image.shape == (3, 16, 16) and label == 0 and val[29][1] == 2
    raw = np.asarray(Image.open(folders / "val" / "0" / "000.png"), dtype=np.float32) / 255
    expected = (torch.from_numpy(raw).permute(2, 0, 1) - torch.tensor(dm.spec.mean).view(3, 1, 1)) / torch.tensor(
        dm.spec.std
    ).view(3, 1, 1)
    assert torch.allclose(image, expected, atol=1e-5)
    batch = next(iter(dm.train_dataloader()))
    assert batch["images"].shape == (8, 3, 16, 16) and set(batch["labels"].tolist()) <= {0, 1, 2}
    assert len(dm.data_checksum) == 64


def test_without_a_validation_folder_it_is_held_out_stratified_and_the_recipe_applies(folders) -> None:
    dm = ImageDataModule("folder", train_dir=str(folders / "train"), image_side=16, batch_size=8,
                         recipe=TrainRecipe(rand_augment="rand-m9-mstd0.5-inc1", random_erasing=0.25))  # fmt: skip
    splits = dm.splits
    assert sum(map(len, splits.values())) == 120 and len(np.unique(np.concatenate(list(splits.values())))) == 120
    assert np.bincount(dm._arrays.train[1][splits["val"]].numpy()).tolist() == [6, 6, 6]
    first, again = (next(iter(dm.train_dataloader()))["images"] for _ in range(2))
    assert first.shape == (8, 3, 16, 16) and not torch.equal(first, again)  # the same images, augmented anew


@pytest.mark.parametrize(
    ("dirs", "message"),
    [
        ({"train_dir": "{root}/flat"}, r"data.train_dir .*flat has no class subfolders .*<class>/<image>.jpg"),
        (
            {"train_dir": "{root}/train", "val_dir": "{root}/other"},
            r"val_dir .*other has classes the training "
            r"folder lacks: \['three'\]",
        ),
        ({"train_dir": "{root}/train", "test_dir": "{root}/missing"}, r"data.test_dir .*missing does not exist"),
        ({"train_dir": "{root}/empty_class"}, r"data.train_dir .*empty_class: .*every class subfolder needs an image"),
    ],
)
def test_bad_folders_are_one_line_errors(folders, tmp_path, dirs, message) -> None:
    (tmp_path / "flat").mkdir()
    Image.new("RGB", (4, 4)).save(tmp_path / "flat" / "a.png")
    write_digits(tmp_path / "other", 1)
    (tmp_path / "other" / "three").mkdir()
    Image.new("RGB", (4, 4)).save(tmp_path / "other" / "three" / "a.png")
    write_digits(tmp_path / "empty_class", 1)
    (tmp_path / "empty_class" / "four").mkdir()
    (tmp_path / "train").symlink_to(folders / "train")
    dirs = {k: v.format(root=tmp_path) for k, v in dirs.items()}
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        ImageDataModule("folder", image_side=16, **dirs).prepare_data()


def test_a_vit_trains_on_a_folder_from_the_command_line(folders, tmp_path) -> None:
    command = [sys.executable, "cli.py", "fit", "-c", "configs/vit/base.yaml", "-c", "configs/vit/tiny.yaml",
               "--data.dataset=folder", f"--data.train_dir={folders / 'train'}", f"--data.val_dir={folders / 'val'}",
               "--data.image_side=16", "--data.batch_size=16", "--trainer.max_steps=6",
               "--trainer.val_check_interval=3", "--trainer.enable_progress_bar=false",
               f"--trainer.logger.init_args.save_dir={tmp_path}"]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    run = next((tmp_path / "lightning_logs").iterdir())
    assert read_run_record(run).status == "done"
