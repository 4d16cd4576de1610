"""Weight averaging (`--averaging.*`, `lit_modules.averaging`): the EMA and the uniform average are the averages of
the trained weights' trajectory, evaluated beside them (`val_avg/*`) without changing training or the trained
weights' metrics, saved beside them in the checkpoint and restored on resume; off, a run is what it was."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import EMAWeightAveraging, ModelCheckpoint

from datamodules.text import TextDataModule
from lit_modules import CausalLM
from lit_modules.averaging import (
    AVERAGED_STATE,
    WeightAverage,
    averaged_weights,
    check_settings,
    ema_decay,
    uniform_start,
)
from lit_modules.optim import OptimConfig
from lit_modules.suite_cli import describe_data
from models import ArchConfig
from models.config import ConfigError

BATCH, SEQ = 8, 16


def _fit(*callbacks: pl.Callback, steps: int = 6, ckpt_path=None, **trainer_args):
    """A 1-layer GPT trained `steps` optimizer steps, validated every 3 batches on 2 batches: trainer, module."""
    pl.seed_everything(0)
    data = TextDataModule(seq_len=SEQ, eval_lengths=[SEQ], val_tokens=512, batch_size=BATCH)
    model = CausalLM(
        ArchConfig(d_model=32, n_layers=1, n_heads=2, max_seq_len=SEQ),
        OptimConfig(lr=3e-3, warmup_steps=0),
        data_info=describe_data(data),
        sample_tokens=0,
    )
    trainer_args = {"val_check_interval": 3, "limit_val_batches": 2, "enable_checkpointing": False} | trainer_args
    trainer = pl.Trainer(
        max_steps=steps,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        deterministic=True,
        callbacks=list(callbacks),
        **trainer_args,
    )
    trainer.fit(model, data, ckpt_path=ckpt_path, weights_only=False)  # hparams hold dataclasses here
    return trainer, model


class _Trajectory(pl.Callback):
    """The trained weights after each optimizer step."""

    def __init__(self) -> None:
        self.weights: list[dict[str, torch.Tensor]] = []

    def on_train_batch_end(self, trainer, pl_module, *args) -> None:
        if trainer.global_step > len(self.weights):
            self.weights.append({k: v.detach().clone() for k, v in pl_module.named_parameters()})


def _averaged(callback: WeightAverage) -> dict[str, torch.Tensor]:
    return dict(callback.average.named_parameters())


def test_the_half_life_in_tokens_is_a_per_step_decay_and_the_uniform_start_the_last_fraction():
    assert ema_decay(1000, 100) ** 10 == pytest.approx(0.5)  # 10 steps of 100 tokens halve the weight
    assert ema_decay(1000, 250) == pytest.approx(0.5**0.25)
    assert uniform_start(0.3, 10) == 7 and uniform_start(0.25, 10) == 8  # round(2.5) = 2 steps
    assert uniform_start(0.001, 10) == 9 and uniform_start(1.0, 10) == 0  # at least the last step; all of them


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"kind": "ema"}, "one of averaging.decay and averaging.half_life_tokens"),
        ({"kind": "ema", "decay": 0.9, "half_life_tokens": 10.0}, "one of averaging.decay"),
        ({"kind": "ema", "decay": 1.0}, r"averaging.decay=1.0 must be in \(0, 1\)"),
        ({"kind": "ema", "half_life_tokens": 0.0}, "must be positive"),
        ({"kind": "ema", "decay": 0.9, "last_fraction": 0.2}, "averaging.kind=ema does not use it"),
        ({"kind": "uniform"}, r"averaging.last_fraction=None must be in \(0, 1\]"),
        ({"kind": "uniform", "last_fraction": 1.5}, r"last_fraction=1.5 must be in \(0, 1\]"),
        ({"kind": "uniform", "last_fraction": 0.2, "decay": 0.9}, "unset averaging.decay"),
    ],
)
def test_settings_the_kind_cannot_use_are_refused(settings, message):
    with pytest.raises(ConfigError, match=message):
        WeightAverage(**settings)
    check_settings("none", 2.0, -1.0, 7.0)  # off: nothing is read


def test_the_ema_is_the_moving_average_of_the_trained_weights():
    """a_1 = w_1, a_t = d·a_(t-1) + (1-d)·w_t, with d from the half-life and the tokens of an optimizer step (the
    global batch × accumulated batches × the window); training itself is the run's without averaging."""
    half_life = 3000.0
    average, trajectory = WeightAverage(kind="ema", half_life_tokens=half_life), _Trajectory()
    _, model = _fit(average, trajectory, steps=5, accumulate_grad_batches=2, limit_val_batches=0)
    assert average.tokens_per_step == BATCH * 2 * SEQ
    assert average.decay == pytest.approx(0.5 ** (BATCH * 2 * SEQ / half_life))
    d, weights = average.decay, trajectory.weights
    assert len(weights) == 5 and int(average._average_model.n_averaged) == 5
    expected = dict(weights[0])
    for w in weights[1:]:
        expected = {k: d * expected[k] + (1 - d) * w[k] for k in expected}
    averaged = _averaged(average)
    for name, value in expected.items():
        torch.testing.assert_close(averaged[name], value, rtol=1e-5, atol=1e-7)
    moved = [k for k in expected if not torch.allclose(expected[k], weights[-1][k])]
    assert "model.head.weight" in moved or "model.tok.weight" in moved
    # the trained weights are the run's without averaging (the average changes nothing it trains)
    _, plain = _fit(steps=5, accumulate_grad_batches=2, limit_val_batches=0)
    for (name, value), trained in zip(plain.named_parameters(), model.parameters()):
        assert torch.equal(value, trained), name


def test_the_uniform_average_is_the_mean_of_the_last_fraction_of_training():
    average, trajectory = WeightAverage(kind="uniform", last_fraction=0.3), _Trajectory()
    _, model = _fit(average, trajectory, steps=10, limit_val_batches=0)
    assert average.start_step == 7 and int(average._average_model.n_averaged) == 3  # after steps 8, 9 and 10
    last = trajectory.weights[-3:]
    averaged = _averaged(average)
    for name in last[0]:
        torch.testing.assert_close(averaged[name], sum(w[name] for w in last) / 3, rtol=1e-5, atol=1e-7)
        assert torch.equal(dict(model.named_parameters())[name], trajectory.weights[-1][name])  # trained stay


@pytest.fixture(scope="module")
def plain_run():
    trainer, model = _fit()
    return dict(trainer.callback_metrics), model


def test_off_a_run_logs_and_trains_exactly_what_it_did(plain_run, tmp_path):
    off = WeightAverage()
    trainer, model = _fit(off, enable_checkpointing=True, default_root_dir=tmp_path)
    metrics, plain = plain_run
    assert dict(trainer.callback_metrics) == metrics and not any("_avg" in k for k in metrics)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), plain.parameters()))
    assert off._average_model is None
    (path,) = tmp_path.rglob("*.ckpt")
    checkpoint = torch.load(path, weights_only=False)  # hparams hold dataclasses here
    assert AVERAGED_STATE not in checkpoint and "WeightAverage" not in checkpoint["callbacks"]
    with pytest.raises(ConfigError, match="has no averaged weights"):
        averaged_weights(checkpoint)


def test_the_average_is_evaluated_beside_the_trained_weights(plain_run, tmp_path):
    """val/* is the trained weights' (as without averaging), val_avg/* the average's: the same numbers as the
    average's weights evaluated alone; the checkpoint keeps the trained weights and the average beside them."""
    average = WeightAverage(kind="ema", decay=0.7)
    trainer, model = _fit(average, enable_checkpointing=True, default_root_dir=tmp_path)
    metrics, _ = plain_run
    logged = dict(trainer.callback_metrics)
    assert {k: v for k, v in logged.items() if "_avg/" not in k} == metrics
    assert sorted(k.replace("val_avg/", "val/") for k in logged if k.startswith("val_avg/")) == sorted(
        k for k in metrics if k.startswith("val/")
    )
    assert logged["val_avg/loss"] != logged["val/loss"]
    (path,) = tmp_path.rglob("*.ckpt")
    checkpoint = torch.load(path, weights_only=False)  # hparams hold dataclasses here
    for name, value in model.state_dict().items():
        assert torch.equal(checkpoint["state_dict"][name], value), name
    assert checkpoint[AVERAGED_STATE].keys() == checkpoint["state_dict"].keys()
    assert checkpoint["averaging"]["n_averaged"] == 6
    alone = _validated(model, checkpoint[AVERAGED_STATE], trainer.datamodule)  # the average's weights by themselves
    assert alone["val/loss"] == pytest.approx(float(logged["val_avg/loss"]), rel=1e-6)
    assert alone["val/ppl"] == pytest.approx(float(logged["val_avg/ppl"]), rel=1e-6)


def _validated(model: CausalLM, weights: dict[str, torch.Tensor], data, precision: str = "32-true") -> dict:
    model.load_state_dict(weights)
    trainer = pl.Trainer(logger=False, enable_progress_bar=False, limit_val_batches=2, precision=precision)
    return trainer.validate(model, data, verbose=False)[0]


def test_the_average_is_evaluated_at_the_runs_precision(tmp_path):
    """Under bf16-mixed the average's steps run in the trainer's autocast, as the trained weights' do."""
    trainer, model = _fit(WeightAverage(kind="ema", decay=0.7), enable_checkpointing=True, default_root_dir=tmp_path,
                          precision="bf16-mixed")  # fmt: skip
    (path,) = tmp_path.rglob("*.ckpt")
    average = torch.load(path, weights_only=False)[AVERAGED_STATE]
    logged = float(trainer.callback_metrics["val_avg/loss"])
    assert _validated(model, average, trainer.datamodule, "bf16-mixed")["val/loss"] == pytest.approx(logged, rel=1e-6)
    assert _validated(model, average, trainer.datamodule)["val/loss"] != pytest.approx(logged, rel=1e-6)


def test_the_average_survives_a_resume(tmp_path):
    """Resumed from step 3's checkpoint, the run ends with the uninterrupted run's average and trained weights."""
    whole, saver = WeightAverage(kind="ema", decay=0.6), ModelCheckpoint(tmp_path, every_n_train_steps=3, save_top_k=-1)
    _, model = _fit(whole, saver, limit_val_batches=0, enable_checkpointing=True)
    resumed = WeightAverage(kind="ema", decay=0.6)
    _, again = _fit(resumed, limit_val_batches=0, ckpt_path=tmp_path / "epoch=0-step=3.ckpt")
    assert int(resumed._average_model.n_averaged) == 6
    for (name, value), other in zip(_averaged(whole).items(), _averaged(resumed).values()):
        torch.testing.assert_close(other, value, rtol=1e-6, atol=1e-8, msg=name)
    for (name, value), other in zip(model.named_parameters(), again.parameters()):
        torch.testing.assert_close(other, value, rtol=1e-6, atol=1e-8, msg=name)


def test_one_averaging_callback_at_a_time():
    with pytest.raises(ConfigError, match="also has EMAWeightAveraging"):
        _fit(WeightAverage(kind="ema", decay=0.9), EMAWeightAveraging(decay=0.9), steps=1)
