"""Learning-rate schedules: cosine as before, WSD's phases and shapes, each schedule's rate a function of (step,
length) only, and the rate as it ran logged per step in TensorBoard."""

from __future__ import annotations

import math

import lightning.pytorch as pl
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from datamodules.text import TextDataModule
from lit_modules import CausalLM
from lit_modules.optim import ConfigError, OptimConfig
from lit_modules.schedules import ScheduleSettings, decay_start, warmup_cosine
from lit_modules.suite_cli import describe_data
from models import ArchConfig


def rates(total: int, **optim) -> list[float]:
    cfg = OptimConfig(**optim)
    return [cfg.multiplier(step, total) for step in range(total)]


def test_cosine_is_the_warmup_cosine_of_before_exactly():
    assert rates(300, warmup_steps=30, min_lr_ratio=0.1) == [warmup_cosine(s, 30, 300, 0.1) for s in range(300)]
    assert rates(300, warmup_steps=30, final_lr_fraction=0.0)[-1] == pytest.approx(0.0, abs=1e-3)


@pytest.mark.parametrize("shape", ["linear", "cosine", "1-sqrt"])
def test_wsd_warms_up_holds_the_peak_then_decays_its_last_fraction(shape):
    values = rates(100, schedule="wsd", warmup_steps=10, decay_fraction=0.2, decay_shape=shape, final_lr_fraction=0.0)
    assert values[:10] == [(s + 1) / 10 for s in range(10)]
    assert decay_start(100, ScheduleSettings(warmup_steps=10, final=0.0, decay_fraction=0.2)) == 80
    assert values[10:81] == [1.0] * 71  # the stable phase, and the decay's first step at the peak
    decay = values[80:]
    last = {"linear": 1 / 20, "cosine": 0.5 * (1 + math.cos(math.pi * 19 / 20)), "1-sqrt": 1 - math.sqrt(19 / 20)}
    assert all(a > b for a, b in zip(decay, decay[1:], strict=False)) and decay[-1] == pytest.approx(last[shape])


def test_one_minus_sqrt_cools_down_faster_than_linear_at_first():
    sqrt, linear = (rates(100, schedule="wsd", warmup_steps=0, decay_shape=s) for s in ("1-sqrt", "linear"))
    assert sqrt[85] < linear[85] and sqrt[85] == pytest.approx(0.1 + 0.9 * (1 - math.sqrt(0.25)))


def test_a_wsd_rate_depends_on_the_step_and_length_alone_so_a_branch_can_resume_a_stable_run():
    """Until the shorter run's decay starts, a 1,000-step and a 4,000-step WSD run have the same rate at every step."""
    short, long = rates(1000, schedule="wsd", warmup_steps=50), rates(4000, schedule="wsd", warmup_steps=50)
    assert short[:800] == long[:800] and short[900] < long[900]


def test_constant_and_linear():
    assert rates(50, schedule="constant", warmup_steps=5)[5:] == [1.0] * 45
    linear = rates(51, schedule="linear", warmup_steps=1, final_lr_fraction=0.0)
    assert linear[1] == 1.0 and linear[-1] == pytest.approx(1 / 50) and linear[26] == pytest.approx(0.5)  # 0 at step 51


@pytest.mark.parametrize(
    ("optim", "message"),
    [
        (dict(schedule="wsdd"), "schedule='wsdd' is not valid; choose one of 'cosine', 'wsd', 'constant', 'linear'"),
        (dict(decay_shape="sqrt"), "choose one of 'linear', 'cosine', '1-sqrt'"),
        (dict(decay_fraction=0.0), "decay_fraction=0.0 must be in"),
        (dict(final_lr_fraction=1.5), "final_lr_fraction=1.5 must be in"),
    ],
)
def test_bad_settings_name_the_choices(optim, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        OptimConfig(**optim)


def test_every_run_logs_its_learning_rate_per_step(tmp_path):
    data = TextDataModule(seq_len=16, eval_lengths=[16], val_tokens=512, batch_size=4, train_batches_per_epoch=50)
    optim = OptimConfig(lr=1e-2, warmup_steps=2, schedule="wsd", decay_fraction=0.5, final_lr_fraction=0.0)
    model = CausalLM(ArchConfig(d_model=16, n_layers=1, n_heads=2, max_seq_len=16), optim,
                     data_info=describe_data(data), sample_tokens=0)  # fmt: skip
    trainer = pl.Trainer(max_steps=8, val_check_interval=8, limit_val_batches=1, log_every_n_steps=1,
                         logger=pl.loggers.TensorBoardLogger(tmp_path), enable_progress_bar=False,
                         enable_checkpointing=False)  # fmt: skip
    trainer.fit(model, data)
    events = EventAccumulator(trainer.logger.log_dir)
    events.Reload()
    tags = [t for t in events.Tags()["scalars"] if t.startswith("lr-AdamW")]
    assert tags, events.Tags()["scalars"]
    logged = {e.step: e.value for e in events.Scalars(tags[0])}
    assert sorted(logged) == list(range(8))
    for step, value in logged.items():
        assert value == pytest.approx(1e-2 * optim.multiplier(step, 8), rel=1e-6), step
