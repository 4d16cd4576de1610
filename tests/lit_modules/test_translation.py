"""Translation: validation loss is unsmoothed and token-weighted; exact match, BLEU and chrF are
corpus-level over every decoded example, whatever the batch sizes; decodes stop at EOS."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import sacrebleu
import torch
import torch.nn.functional as F

from datamodules.translation import TranslationDataModule
from lit_modules import Translation
from lit_modules.suite_cli import describe_data
from models import ArchConfig


def _setup(batch_size: int, **trainer_args):
    data = TranslationDataModule(dataset="scan", split="simple", batch_size=batch_size)
    torch.manual_seed(0)
    model = Translation(
        ArchConfig(
            d_model=32,
            n_layers=1,
            n_heads=2,
            max_seq_len=64,
            pos_encoding="sinusoidal",
            init_std=0.3,
            tie_embeddings=False,
        ),
        data_info=describe_data(data),
    )
    trainer = pl.Trainer(
        logger=False, enable_progress_bar=False, enable_checkpointing=False, deterministic=True, **trainer_args
    )
    return data, model, trainer


def test_sequence_metrics_are_corpus_level_over_uneven_batches():
    data, model, trainer = _setup(batch_size=300)  # SCAN's 1,000 validation pairs: 300, 300, 300, 100
    hypotheses, references = [], []

    def half_right(batch):  # every other example exact, the others lose their last action
        refs = list(batch["tgt_text"])
        hyps = [r if (len(references) + i) % 2 == 0 else r.rsplit(" ", 1)[0] for i, r in enumerate(refs)]
        hypotheses.extend(hyps), references.extend(refs)
        return hyps

    model.decode = half_right
    (metrics,) = trainer.validate(model, datamodule=data, verbose=False)

    assert len(references) == 1000
    expected_exact = sum(h == r for h, r in zip(hypotheses, references)) / len(references)
    assert metrics["val/exact_match"] == pytest.approx(expected_exact)
    assert metrics["val/bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score / 100, abs=1e-4)
    # torchmetrics' CHRFScore defaults to word bigrams too, i.e. chrF++ (sacrebleu's word_order=2)
    chrf = sacrebleu.corpus_chrf(hypotheses, [references], word_order=2).score / 100
    assert metrics["val/chrf"] == pytest.approx(chrf, abs=1e-4)

    # loss: unsmoothed cross entropy averaged over target tokens of the whole set, not over batches
    total, tokens = 0.0, 0
    model.eval()
    with torch.no_grad():
        for batch in data.val_dataloader():
            logits = model.forward_batch(batch)
            total += F.cross_entropy(
                logits.flatten(0, 1), batch["tgt_out"].flatten(), ignore_index=-100, reduction="sum"
            ).item()
            tokens += int((batch["tgt_out"] != -100).sum())
    assert metrics["val/loss"] == pytest.approx(total / tokens, rel=1e-5)


def test_decode_stops_at_eos():
    data, model, trainer = _setup(batch_size=16, limit_val_batches=1)  # a random model: init_std 0.3
    trainer.validate(model, datamodule=data, verbose=False)  # attaches the datamodule (decode needs its tokenizer)
    model.eval()
    batch = next(iter(data.val_dataloader()))
    max_len = batch["tgt_out"].shape[1] + model.max_decode_extra
    rows = model.model.beam_search(
        batch["src_ids"], batch["src_mask"], model.bos_id, model.eos_id, max_len, beam_size=1
    )
    rows = rows.tolist()
    stopped = [row.index(model.eos_id) for row in rows if model.eos_id in row]
    assert stopped and min(stopped) < max_len - 1, "no row emits EOS early: the test would prove nothing"
    for row, text in zip(rows, model.decode(batch)):
        kept = row[: row.index(model.eos_id)] if model.eos_id in row else row
        assert text == data.tokenizer.decode(kept)
