"""Length-extrapolation evaluation: one loss per evaluation length, nan beyond a learned table."""

from __future__ import annotations

import math
import platform

import lightning.pytorch as pl
import pytest
import torch

from contract.run_record import read_run_record
from datamodules.text import TextDataModule
from lit_modules import CausalLM, DivergenceGuard, RunMetadata
from lit_modules.optim import OptimConfig
from lit_modules.suite_cli import describe_data
from models import ArchConfig


def _fit(pos: str, tmp_path, lr: float = 3e-3, callbacks=()):
    data = TextDataModule(
        seq_len=16, eval_lengths=[16, 32, 64], val_tokens=1024, batch_size=8, train_batches_per_epoch=50
    )
    model = CausalLM(
        ArchConfig(d_model=32, n_layers=1, n_heads=2, max_seq_len=16, pos_encoding=pos),
        OptimConfig(lr=lr, warmup_steps=0),
        data_info=describe_data(data),
        sample_tokens=8,
    )
    trainer = pl.Trainer(
        max_steps=6,
        val_check_interval=6,
        limit_val_batches=4,
        logger=pl.loggers.TensorBoardLogger(tmp_path),
        enable_progress_bar=False,
        enable_checkpointing=False,
        callbacks=list(callbacks),
        deterministic=True,
    )
    trainer.fit(model, data)
    return trainer


@pytest.mark.parametrize("pos", ["learned", "alibi"])
def test_loss_at_every_length(pos, tmp_path, recwarn):
    metrics = _fit(pos, tmp_path).callback_metrics
    said = [str(w.message) for w in recwarn if "learned positions end at" in str(w.message)]
    # one warning for every length past the table, with the fix
    assert said == (["val/loss@32, val/loss@64: learned positions end at max_seq_len=16, so these are logged as nan; "
                     "evaluate at lengths up to it (--data.eval_lengths) or use positions that extrapolate"]
                    if pos == "learned" else [])  # fmt: skip
    assert metrics["val/loss"] == metrics["val/loss@16"]
    assert metrics["val/bpt"] == pytest.approx(float(metrics["val/loss"]) / math.log(2))
    assert math.isfinite(metrics["val/ppl"])
    beyond = [float(metrics[f"val/loss@{n}"]) for n in (32, 64)]
    if pos == "learned":
        assert all(math.isnan(v) for v in beyond)
    else:
        assert all(math.isfinite(v) for v in beyond)


def test_divergence_is_recorded(tmp_path):
    trainer = _fit("rope", tmp_path, lr=1e3, callbacks=[RunMetadata(), DivergenceGuard(max_loss=10.0)])
    info = read_run_record(tmp_path / "lightning_logs/version_0")
    assert info.status == "diverged" and info.diverged_at_step <= 6
    assert trainer.global_step <= 6


def test_run_json_records_the_machine(tmp_path):
    """One commit's CPU runs round differently on another CPU: run.json says which machine made the numbers."""
    _fit("rope", tmp_path, callbacks=[RunMetadata()])
    machine = read_run_record(tmp_path / "lightning_logs/version_0").machine
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert machine["cpu"] and machine["platform"] == platform.platform()
    assert ("gpu" in machine) == torch.cuda.is_available()


def test_max_seq_len_comes_from_the_data_unless_set():
    """Unset, max_seq_len is the data's longest sequence (text: the training window; algorithmic: the
    longest instance); a value in the config wins. The saved hparams keep it unset, so a re-run
    from them takes it from the data again."""
    from dataclasses import replace

    from datamodules.algorithmic import AlgorithmicDataModule

    arch = ArchConfig(d_model=32, n_layers=1, n_heads=2, pos_encoding="learned")
    text = CausalLM(arch, data_info=describe_data(TextDataModule(seq_len=24)))
    assert text.arch.max_seq_len == text.max_positions == text.model.stack.pos.table.num_embeddings == 24
    assert text.hparams["arch"].max_seq_len is None
    reverse = describe_data(AlgorithmicDataModule(task="reverse", train_max_len=10, test_max_len=20))
    assert CausalLM(arch, data_info=reverse).arch.max_seq_len == 1 + 20 + 1 + 20 + 1  # <bos> x <sep> y <eos>
    assert CausalLM(replace(arch, max_seq_len=48), data_info=reverse).max_positions == 48
    rope = CausalLM(replace(arch, pos_encoding="rope"), data_info={"vocab_size": 50, "seq_len": 24})
    assert rope.arch.max_seq_len == 24 and rope.max_positions is None  # runs at any length


def test_test_stage_logs_the_test_split(tmp_path):
    """`cli.py test` evaluates a GPT on the data's test split as test/* (the same metrics as validation)."""
    trainer = _fit("rope", tmp_path)
    data = TextDataModule(seq_len=16, eval_lengths=[16, 32], val_tokens=512, batch_size=8, test_split="held_out")
    model = trainer.lightning_module
    model.val_loss = type(model.val_loss)()  # as a fresh process loads it: no metric made by a validation yet
    trainer.test(model, data, verbose=False)
    metrics = dict(trainer.callback_metrics)
    assert {"test/loss", "test/loss@16", "test/loss@32", "test/bpt", "test/ppl"} <= metrics.keys()
    assert metrics["test/loss"] == metrics["test/loss@16"] and not any(k.startswith("val/") for k in metrics)
    trainer.validate(trainer.lightning_module, data, verbose=False)
    assert trainer.callback_metrics["val/loss@16"] != metrics["test/loss@16"]  # other tokens


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`:UserWarning")  # no Trainer: the logs go nowhere
@pytest.mark.parametrize("z_loss", [0.0, 0.1])
def test_z_loss_adds_the_mean_squared_log_normaliser_of_the_labelled_positions(z_loss):
    """PaLM's z-loss: z·mean(log² Z) over the positions that have a label, on top of the cross-entropy."""
    import torch
    import torch.nn.functional as F

    from contract.labels import IGNORE_INDEX

    model = CausalLM(ArchConfig(d_model=32, n_layers=1, n_heads=2, max_seq_len=16), OptimConfig(z_loss=z_loss))
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11) * 3 + 2  # log Z far from 0
    labels = torch.randint(0, 11, (2, 5))
    labels[0, :2] = IGNORE_INDEX
    keep = labels != IGNORE_INDEX
    cross_entropy = F.cross_entropy(logits[keep], labels[keep])
    expected = cross_entropy + z_loss * logits[keep].logsumexp(-1).square().mean()
    torch.testing.assert_close(model.train_loss(logits, labels), expected)


def test_a_negative_z_loss_is_refused():
    with pytest.raises(ValueError, match="z_loss=-0.1 must be 0"):
        OptimConfig(z_loss=-0.1)
