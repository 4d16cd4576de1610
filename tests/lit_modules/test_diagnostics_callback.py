"""The diagnostics callback (per-layer scalars and heatmaps in TensorBoard, a run trained the same with it on or
off) and the loss-spike count (its rule, its record in run.json, its resume)."""

from __future__ import annotations

import json
import math

import lightning.pytorch as pl
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from contract.run_record import read_run_record
from datamodules.text import TextDataModule
from lit_modules import CausalLM, RunMetadata
from lit_modules.diagnostics_callbacks import Diagnostics, LossSpikes
from lit_modules.optim import OptimConfig
from lit_modules.suite_cli import describe_data
from models import ArchConfig


def _fit(tmp_path, callbacks, steps: int = 6, accumulate: int = 1):
    torch.manual_seed(0)
    data = TextDataModule(seq_len=16, eval_lengths=[16], val_tokens=512, batch_size=8, train_batches_per_epoch=50)
    model = CausalLM(
        ArchConfig(d_model=32, n_layers=2, n_heads=2, max_seq_len=16, dropout=0.1),
        OptimConfig(lr=3e-3, warmup_steps=0),
        data_info=describe_data(data),
        sample_tokens=0,
    )
    trainer = pl.Trainer(
        max_steps=steps, val_check_interval=steps, limit_val_batches=2, logger=pl.loggers.TensorBoardLogger(tmp_path),
        enable_progress_bar=False, enable_checkpointing=False, callbacks=list(callbacks), deterministic=True,
        log_every_n_steps=1, accumulate_grad_batches=accumulate,
    )  # fmt: skip
    trainer.fit(model, data)
    events = EventAccumulator(trainer.logger.log_dir, size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    return trainer, events


def _curve(events, tag):
    return {e.step: e.value for e in events.Scalars(tag)}


def test_diagnostics_log_every_layer_and_leave_training_unchanged(tmp_path):
    _, plain = _fit(tmp_path / "off", [Diagnostics(every_n_steps=0)])
    _, probed = _fit(tmp_path / "on", [Diagnostics(every_n_steps=2, heatmap_every_n_steps=3)])
    assert _curve(plain, "train/loss") == _curve(probed, "train/loss")  # dropout on: the probes draw nothing
    assert not [t for t in plain.Tags()["scalars"] if t.startswith("diagnostics/")]
    tags = set(probed.Tags()["scalars"])
    per_layer = [f"diagnostics/{kind}/block{i}" for kind in ("residual_rms", "grad_norm") for i in (0, 1)]
    per_layer += [f"diagnostics/{kind}/block{i}.attn" for kind in ("attn_entropy", "attn_distance", "attn_max_logit")
                  for i in (0, 1)]  # fmt: skip
    headline = ["diagnostics/attn_max_logit", "diagnostics/logit_mean", "diagnostics/logit_max", "diagnostics/log_z"]
    assert set(per_layer + headline + ["diagnostics/grad_norm/other"]) <= tags
    for tag in per_layer + headline:
        assert sorted(_curve(probed, tag)) == [0, 2, 4], tag  # every second optimizer step, from step 0
    entropy = _curve(probed, "diagnostics/attn_entropy/block0.attn")
    assert all(0 < v < math.log(16) for v in entropy.values())  # a causal row of ≤ 16 keys
    assert _curve(probed, "diagnostics/attn_max_logit")[4] == max(
        _curve(probed, f"diagnostics/attn_max_logit/block{i}.attn")[4] for i in (0, 1)
    )
    # log Z ≥ the mean logit, and at initialisation near log(vocab)
    assert _curve(probed, "diagnostics/log_z")[0] > _curve(probed, "diagnostics/logit_mean")[0]
    growth = _curve(probed, "diagnostics/residual_growth")
    rms = [_curve(probed, f"diagnostics/residual_rms/block{i}")[4] for i in (0, 1)]
    assert growth[4] == pytest.approx(math.log(rms[1] / rms[0]), rel=1e-5)
    images = probed.Tags()["images"]
    assert set(images) == {"diagnostics/attn_entropy", "diagnostics/attn_distance"}
    for tag in images:
        shots = probed.Images(tag)
        assert [s.step for s in shots] == [0, 4]  # the first probe, then the first ≥ 3 steps after it
        assert shots[0].encoded_image_string[:8] == b"\x89PNG\r\n\x1a\n" and shots[0].height > 100


def test_the_last_probe_headlines_run_json(tmp_path):
    trainer, events = _fit(tmp_path, [RunMetadata(), Diagnostics(every_n_steps=4)])
    info = read_run_record(tmp_path / "lightning_logs/version_0")
    last = info.diagnostics
    headlines = (last.attn_max_logit, last.logit_max, last.log_z, last.residual_growth)
    assert last.step == 4 and None not in headlines
    assert last.log_z == pytest.approx(_curve(events, "diagnostics/log_z")[4])


def test_an_accumulated_step_is_probed_once(tmp_path):
    _, events = _fit(tmp_path, [Diagnostics(every_n_steps=2)], steps=4, accumulate=2)
    assert sorted(_curve(events, "diagnostics/grad_norm/block0")) == [0, 2]


def test_bad_settings_name_the_fix():
    with pytest.raises(ValueError, match="every_n_steps=-1 must be ≥ 0"):
        Diagnostics(every_n_steps=-1)
    with pytest.raises(ValueError, match="heatmap_every_n_steps=-5 must be ≥ 0"):
        Diagnostics(heatmap_every_n_steps=-5)
    with pytest.raises(ValueError, match="window=1 must be ≥ 2"):
        LossSpikes(window=1)


def _noise(n: int, seed: int = 0) -> list[float]:
    g = torch.Generator().manual_seed(seed)
    return (3.0 + 0.01 * torch.randn(n, generator=g)).tolist()


def test_the_spike_rule():
    spikes = LossSpikes(window=20, threshold=6.0)
    losses = _noise(60)
    losses[5] = 9.0  # before the window is full: not judged (and out of the window by step 25)
    losses[30] = losses[31] = 3.5  # one spike over two steps
    losses[45] = 3.2  # the second
    began = [step for step, loss in enumerate(losses) if spikes.observe(step, loss)]
    assert began == [30, 45] and spikes.count == 2 and spikes.steps == [30, 45]
    assert not spikes.observe(60, float("nan"))  # divergence is DivergenceGuard's


def test_a_trend_is_not_a_spike():
    spikes = LossSpikes(window=20, threshold=6.0)
    assert not any(spikes.observe(s, 5.0 - 0.01 * s + v - 3.0) for s, v in enumerate(_noise(300)))


def test_the_count_survives_a_resume():
    first = LossSpikes(window=10)
    losses = _noise(40)
    losses[20] = 4.0
    for step, loss in enumerate(losses[:30]):
        first.observe(step, loss)
    resumed = LossSpikes(window=10)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))  # as a checkpoint keeps it
    for step, loss in enumerate(losses[30:], 30):
        assert resumed.observe(step, loss) == first.observe(step, loss)
    assert resumed.count == first.count == 1 and resumed.steps == [20]


class ScriptedLoss(pl.LightningModule):
    """Logs `train/loss` from a script (a spike at step 30), as the task modules do."""

    def __init__(self, losses):
        super().__init__()
        self.losses, self.weight = losses, torch.nn.Parameter(torch.zeros(()))

    def training_step(self, batch, batch_idx):
        loss = self.weight * 0 + self.losses[self.global_step]
        self.log("train/loss", loss)
        return loss

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.zeros(len(self.losses), 1), batch_size=1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def model_stats(self):  # what RunMetadata records of a model (RunRecord requires each)
        return {"params": 1, "params_non_embedding": 1, "params_trainable": 1, "flops_per_token": 2.0}


def test_spikes_reach_run_json_and_tensorboard(tmp_path):
    losses = _noise(60)
    losses[30] = 4.0
    trainer = pl.Trainer(
        max_steps=60, logger=pl.loggers.TensorBoardLogger(tmp_path), enable_progress_bar=False,
        enable_checkpointing=False, enable_model_summary=False, log_every_n_steps=1,
        callbacks=[RunMetadata(), LossSpikes(window=20)],
    )  # fmt: skip
    trainer.fit(ScriptedLoss(losses))
    info = read_run_record(tmp_path / "lightning_logs/version_0")
    assert info.loss_spikes == 1 and info.loss_spike_steps == (30,) and info.status == "done"
    events = EventAccumulator(trainer.logger.log_dir)
    events.Reload()
    assert _curve(events, "diagnostics/loss_spikes") == {30: 1.0}
