"""configs/vit/finetune_digits.yaml offline: a ViT pre-trained at 28x28 (MNIST's torchvision layout, written
here from upsampled digits: no download) fine-tunes on the 8x8 digits with every pre-trained weight, its
learned position table resampled to the new grid."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from timm.layers import resample_abs_pos_embed

from cli import cli_main
from models.finetune import read_weights

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
VIT = ["-c", str(CONFIGS / "vit/base.yaml"), "-c", str(CONFIGS / "vit/tiny.yaml")]
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
LOGS = "--trainer.logger.init_args.save_dir="  # + a folder: runs/ otherwise
SHORT = ["--trainer.max_steps=2", "--trainer.val_check_interval=2", "--trainer.limit_val_batches=1",
         "--trainer.num_sanity_val_steps=0"]  # fmt: skip


def fake_mnist(root: Path, train: int = 256, test: int = 64) -> Path:
    """torchvision's MNIST files (`root/MNIST/raw`, uncompressed idx) holding digits upsampled to 28x28."""
    digits = load_digits()
    images = F.interpolate(torch.from_numpy(digits.images).float()[:, None], size=28, mode="bilinear")[:, 0]
    images = (images * 255 / 16).round().clamp(0, 255).to(torch.uint8).numpy()
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for split, part in (("train", slice(0, train)), ("t10k", slice(train, train + test))):
        x, y = images[part], digits.target[part].astype(np.uint8)
        (raw / f"{split}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, len(x), 28, 28) + x.tobytes())
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, len(y)) + y.tobytes())
    return root


@pytest.mark.parametrize("layout", ["1d", "2d"])
def test_pretrained_at_28x28_fine_tunes_on_8x8_digits_with_every_weight(layout, tmp_path):
    checkpoint = {
        "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
        "init_args": {"dirpath": str(tmp_path / "pre"), "save_last": True, "save_top_k": 0},
    }
    pre = cli_main([
        "fit", *VIT, *QUIET, *SHORT, f"--model.learned_layout={layout}", "--data.dataset=mnist",
        f"--data.data_dir={fake_mnist(tmp_path / 'mnist')}", "--data.batch_size=8", f"{LOGS}{tmp_path / 'logs'}",
        "--trainer.callbacks+=" + json.dumps(checkpoint),
    ])  # fmt: skip
    assert pre.model.model.num_tokens == 14 * 14 + 1

    args = [*VIT, "-c", str(CONFIGS / "vit/finetune_digits.yaml"), *QUIET, *SHORT,
            f"--model.init_from={tmp_path / 'pre' / 'last.ckpt'}", f"--model.learned_layout={layout}",
            f"{LOGS}{tmp_path / 'logs'}"]  # fmt: skip
    cli = cli_main(args, run=False)  # built, not run (no subcommand)
    cli.model.prepare_model()  # what fit does first (configure_model): load, then set what trains
    model = cli.model.model
    assert model.num_tokens == 4 * 4 + 1  # the 8x8 digits' grid
    source = read_weights(tmp_path / "pre" / "last.ckpt")
    loaded = model.state_dict()
    assert source.keys() == loaded.keys()  # nothing replaced, nothing left out
    tables = {k for k in source if k.startswith("stack.pos.")}
    assert all(torch.equal(value, source[key]) for key, value in loaded.items() if key not in tables)
    if layout == "1d":  # CLS row kept, the 14x14 grid resampled to 4x4 as timm does
        (key,) = tables
        assert source[key].shape[0] == 197 and loaded[key].shape[0] == 17
        expected = resample_abs_pos_embed(source[key][None], [4, 4], [14, 14], num_prefix_tokens=1)[0]
        assert torch.allclose(loaded[key], expected)
    else:  # a row and a column table, each interpolated from 14 to 4 entries
        assert {tuple(source[k].shape) for k in tables} == {(14, 32)}
        assert {tuple(loaded[k].shape) for k in tables} == {(4, 32)}
        expected = F.interpolate(source["stack.pos.rows.weight"].T[None], size=4, mode="linear")[0].T
        assert torch.allclose(loaded["stack.pos.rows.weight"], expected)
    assert torch.equal(model.patch.weight, pre.model.model.patch.weight)

    cli.trainer.fit(cli.model, datamodule=cli.datamodule)  # trains on digits from the loaded weights
    assert cli.trainer.global_step == 2 and cli.model.model is model
    assert not torch.equal(model.patch.weight, pre.model.model.patch.weight)
    assert torch.isfinite(cli.trainer.callback_metrics["val/loss"])
