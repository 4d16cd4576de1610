"""Sequence-to-sequence translation with an encoder-decoder."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy
from torchmetrics.text import CHRFScore, SacreBLEUScore

from models import ArchConfig, EncoderDecoder
from models.config import IGNORE_INDEX, ConfigError

from .base import TaskModule
from .optim import OptimConfig
from .prediction_writer import datamodule_attr


def until_eos(tokens: list[int], eos_id: int) -> list[int]:
    """A decoded row up to (without) its first EOS; the whole row if it never ended."""
    return tokens[: tokens.index(eos_id)] if eos_id in tokens else tokens


class Translation(TaskModule):
    """Label-smoothed cross entropy under teacher forcing; token accuracy; and, on decodes of
    the validation/test sets, exact-match sequence accuracy, SacreBLEU and chrF++ (`val/chrf`:
    torchmetrics' CHRFScore defaults, character 6-grams plus word bigrams).

    `cli.py predict` translates source sentences (greedy or beam search: `predict_beam_size`, else the
    run's `beam_size`), up to the data's `max_len` tokens; the record's `reference` is the target when the
    data has one.

    Args:
        label_smoothing: label smoothing of the training loss (validation loss is unsmoothed).
        beam_size: 1 decodes greedily, more uses beam search.
        length_penalty: beam-search length normalisation exponent.
        max_decode_extra: decode up to the reference length plus this many tokens.
        predict_beam_size: beam size of `cli.py predict` (1: greedy); `None`: `beam_size`.
    """

    hparam_metrics = ("val/loss", "val/exact_match", "val/bleu")
    predict_args = ("predict_beam_size",)

    def __init__(
        self,
        arch: ArchConfig = ArchConfig(pos_encoding="sinusoidal"),
        optim: OptimConfig = OptimConfig(),
        data_info: dict[str, Any] | None = None,
        compile: bool = False,
        label_smoothing: float = 0.1,
        beam_size: int = 1,
        length_penalty: float = 1.0,
        max_decode_extra: int = 10,
        predict_beam_size: int | None = None,
        **finetune: Any,  # TaskModule's: init_from, init_replace, freeze, peft, quantize
    ):
        super().__init__(arch, optim, data_info, compile, **finetune)
        self.predict_beam_size = beam_size if predict_beam_size is None else predict_beam_size
        for name, size in (("beam_size", beam_size), ("predict_beam_size", self.predict_beam_size)):
            if size < 1:
                raise ConfigError(f"{name}={size} must be a positive integer (1: greedy)")
        self.model = EncoderDecoder(self.arch)
        self.label_smoothing, self.beam_size = label_smoothing, beam_size
        self.length_penalty, self.max_decode_extra = length_penalty, max_decode_extra
        self.bos_id = int(self.data_info.get("bos_token_id", 2))
        self.eos_id = int(self.data_info.get("eos_token_id", 3))
        self.metrics = torch.nn.ModuleDict(
            {
                stage: torch.nn.ModuleDict(
                    {
                        "loss": MeanMetric(),
                        "token_acc": MulticlassAccuracy(
                            self.arch.vocab_size, average="micro", ignore_index=IGNORE_INDEX
                        ),
                        "exact_match": MeanMetric(),
                        "bleu": SacreBLEUScore(),
                        "chrf": CHRFScore(),
                    }
                )
                for stage in ("val", "test")
            }
        )

    def forward_batch(self, batch: dict[str, Any]) -> torch.Tensor:
        return self.model(batch["src_ids"], batch["tgt_in"], batch["src_mask"])

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        return self.train_loss(self.forward_batch(batch), batch["tgt_out"], self.label_smoothing)

    def decode(self, batch: dict[str, Any], max_len: int | None = None, beam_size: int | None = None) -> list[str]:
        """Translations of the batch's sources, at most `max_len` tokens (default: the references' length
        plus `max_decode_extra`), with `beam_size` (default: the run's)."""
        tokenizer = datamodule_attr(self, "tokenizer")
        max_len = max_len or batch["tgt_out"].shape[1] + self.max_decode_extra
        beam_size = beam_size or self.beam_size
        ids = self.model.beam_search(
            batch["src_ids"], batch["src_mask"], self.bos_id, self.eos_id, max_len, beam_size, self.length_penalty
        )
        return [tokenizer.decode(until_eos(row, self.eos_id)) for row in ids.tolist()]

    def _evaluate(self, batch: dict[str, Any], stage: str) -> None:
        metrics = self.metrics[stage]
        logits = self.forward_batch(batch)
        target = batch["tgt_out"]
        loss = F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=IGNORE_INDEX)
        metrics["loss"].update(loss, weight=(target != IGNORE_INDEX).sum())
        metrics["token_acc"].update(logits.flatten(0, 1), target.flatten())
        hypotheses, references = self.decode(batch), list(batch["tgt_text"])
        exact = [float(h.strip() == r.strip()) for h, r in zip(hypotheses, references)]
        metrics["exact_match"].update(torch.tensor(exact, device=self.device))
        metrics["bleu"].update(hypotheses, [[r] for r in references])
        metrics["chrf"].update(hypotheses, [[r] for r in references])
        prefix = stage + self.eval_suffix  # `val_avg`: the averaged weights' (lit_modules.averaging)
        for name, metric in metrics.items():
            self.log(f"{prefix}/{name}", metric, prog_bar=name in ("loss", "exact_match"), batch_size=len(references))

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def stats_seq_len(self) -> int:
        return int(self.data_info.get("max_len", self.arch.max_seq_len))

    @property
    def predict_max_len(self) -> int:
        """Tokens a prediction decodes at most: the data's `max_len`, the longest target it trained on."""
        return int(self.data_info.get("max_len", self.arch.max_seq_len))

    def predict_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> list[dict[str, Any]]:
        translations = self.decode(batch, self.predict_max_len, self.predict_beam_size)
        records = []
        for index, source, translation, reference in zip(batch["index"], batch["src_text"], translations,
                                                         batch["tgt_text"]):  # fmt: skip
            record = {"index": int(index), "input": source, "output": translation}
            records.append(record | ({"reference": reference} if reference else {}))
        return records

    def predict_settings(self) -> dict[str, Any]:
        return {
            "beam_size": self.predict_beam_size,
            "length_penalty": self.length_penalty,
            "max_len": self.predict_max_len,
        }
