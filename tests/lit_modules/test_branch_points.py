"""`BranchPoints` keeps a horizons sweep's stable run at every branch point, even when the run was killed between
the sweep's `ModelCheckpoint` saving that step and `BranchPoints` saving it: the run then resumes exactly at the
branch point, never passes it again, and must save it at once; a branch from that file trains as one from the
file the uninterrupted run wrote."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_modules.branch_points import BranchPoints

STEPS = [2, 4]  # the branch points; the last ends the run


class Regression(pl.LightningModule):
    """A linear model on fixed data with Adam (a state that the optimizer restores), shuffled by the seed."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def train_dataloader(self):
        inputs, targets = torch.linspace(-1, 1, 64).reshape(16, 4), torch.linspace(0, 1, 16)[:, None]
        data = torch.utils.data.TensorDataset(inputs, targets)
        return torch.utils.data.DataLoader(data, batch_size=2, shuffle=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.1)


def fit(folder, max_steps, callbacks, ckpt_path=None) -> Regression:
    pl.seed_everything(0)
    model = Regression()
    trainer = pl.Trainer(max_steps=max_steps, callbacks=callbacks, default_root_dir=folder, logger=False,
                         enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(model, ckpt_path=ckpt_path)
    return model


def stable_run(folder) -> list:
    return [ModelCheckpoint(dirpath=folder, every_n_train_steps=2, save_last=True), BranchPoints(str(folder), STEPS)]


def test_a_run_resumed_at_a_branch_point_saves_it_and_a_branch_from_it_trains_the_same(tmp_path):
    fit(tmp_path / "run", 100, stable_run(tmp_path / "run"))  # BranchPoints ends it at the last point
    points = tmp_path / "run"
    kept = {step: torch.load(points / f"step{step}.ckpt", weights_only=False) for step in STEPS}
    assert torch.load(points / "last.ckpt", weights_only=False)["global_step"] == STEPS[-1]
    (points / f"step{STEPS[-1]}.ckpt").unlink()  # killed after last.ckpt, before this file

    fit(tmp_path / "run", 100, stable_run(points), ckpt_path=points / "last.ckpt")
    saved = torch.load(points / f"step{STEPS[-1]}.ckpt", weights_only=False)
    assert saved["global_step"] == STEPS[-1] and not list(points.glob(".*part"))
    for key in ("state_dict", "optimizer_states"):
        assert str(saved[key]) == str(kept[STEPS[-1]][key]), key
    torch.save(kept[STEPS[-1]], points / "original.ckpt")
    branches = [fit(tmp_path / name, STEPS[-1] + 3, [], points / name_ckpt)
                for name, name_ckpt in (("a", "original.ckpt"), ("b", f"step{STEPS[-1]}.ckpt"))]  # fmt: skip
    for a, b in zip(branches[0].parameters(), branches[1].parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("steps", [[], [0], [2, True]])
def test_branch_points_need_steps_of_at_least_one(tmp_path, steps):
    with pytest.raises(ValueError, match="needs global steps of at least 1"):
        BranchPoints(str(tmp_path), steps)
