"""GPT language modelling, with validation at several context lengths (length extrapolation)."""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric
from torchmetrics.text import Perplexity

from models import GPT, ArchConfig

from .base import TaskModule
from .optim import OptimConfig


class CausalLM(TaskModule):
    """Next-token prediction.

    Validation runs one dataloader per evaluation length (the DataModule's `eval_lengths`, by
    default 1×, 2×, 4×, 8× the training length, over the same validation tokens) and logs
    `val/loss@<L>`; `val/loss`, `val/ppl` and `val/bpt` (bits per token; bits per character at
    character level) are taken at the first length. A `learned` table shorter than L gives `nan`.

    Batches with `lengths` (algorithmic tasks, loss on the answer only) also log exact-match
    accuracy per instance length, `val/exact_match@<n>`, and its means in and out of the training
    distribution (`val/exact_match_id`, `val/exact_match_ood`, split at data_info's
    `train_max_len`). All answer tokens right under teacher forcing is exactly the condition for
    greedy decoding to reproduce the answer, so no decoding loop is needed.

    Args:
        sample_tokens: tokens sampled into TensorBoard at each validation (0: none).
        sample_temperature: sampling temperature.
    """

    hparam_metrics = ("val/loss", "val/ppl")

    def __init__(
        self,
        arch: ArchConfig = ArchConfig(),
        optim: OptimConfig = OptimConfig(),
        data_info: dict[str, Any] | None = None,
        compile: bool = False,
        sample_tokens: int = 200,
        sample_temperature: float = 0.8,
    ):
        super().__init__(arch, optim, data_info, compile)
        self.model = GPT(self.arch)
        self.sample_tokens, self.sample_temperature = sample_tokens, sample_temperature
        self.val_loss: dict[int, MeanMetric] = {}
        self.val_names: dict[int, str | None] = {}
        self.unfit: set[int] = set()
        self.exact_match: dict[int, MeanMetric] = {}
        self.val_ppl = Perplexity(ignore_index=-100)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model(batch["input_ids"])
        return F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100), logits

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss, _ = self.loss(batch)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def _fits(self, length: int) -> bool:
        return self.arch.pos_encoding != "learned" or length <= self.arch.max_seq_len

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        length = batch["input_ids"].shape[1]
        if dataloader_idx not in self.val_loss:
            self.val_loss[dataloader_idx] = MeanMetric().to(self.device)
            # fixed-length windows are named by their length; padded variable-length data is not
            self.val_names[dataloader_idx] = None if "lengths" in batch else f"val/loss@{length}"
        if not self._fits(length):
            self.unfit.add(dataloader_idx)
            return
        loss, logits = self.loss(batch)
        self.val_loss[dataloader_idx].update(loss, weight=(batch["labels"] != -100).sum())
        if dataloader_idx == 0:
            self.val_ppl.update(logits, batch["labels"])
        if "lengths" in batch:
            self._update_exact_match(logits, batch["labels"], batch["lengths"])

    def _update_exact_match(self, logits: torch.Tensor, labels: torch.Tensor, lengths: torch.Tensor) -> None:
        correct = ((logits.argmax(-1) == labels) | (labels == -100)).all(dim=1).float()
        for n in lengths.unique().tolist():
            if n not in self.exact_match:
                self.exact_match[n] = MeanMetric().to(self.device)
            self.exact_match[n].update(correct[lengths == n])

    def _log_exact_match(self) -> None:
        if not self.exact_match:
            return
        boundary = self.data_info.get("train_max_len")
        scores = {n: metric.compute() for n, metric in sorted(self.exact_match.items())}
        for n, value in scores.items():
            self.log(f"val/exact_match@{n}", value)
        self.log("val/exact_match", torch.stack(list(scores.values())).mean())
        if boundary is not None:
            for name, keep in (("id", lambda n: n <= boundary), ("ood", lambda n: n > boundary)):
                values = [v for n, v in scores.items() if keep(n)]
                if values:
                    self.log(f"val/exact_match_{name}", torch.stack(values).mean())
        for metric in self.exact_match.values():
            metric.reset()

    def on_validation_epoch_end(self) -> None:
        losses = {}
        for idx in sorted(self.val_loss):
            if idx in self.unfit:
                if self.trainer.global_step == 0:
                    warnings.warn(f"{self.val_names[idx]}: learned positions end at max_seq_len={self.arch.max_seq_len}; logged as nan")
                losses[idx] = torch.tensor(math.nan, device=self.device)
            else:
                losses[idx] = self.val_loss[idx].compute()
            self.val_loss[idx].reset()
            if self.val_names[idx]:
                self.log(self.val_names[idx], losses[idx])
        if losses:
            loss = losses[0]  # the first loader evaluates at the training length
            self.log("val/loss", loss, prog_bar=True)
            self.log("val/bpt", loss / math.log(2))
            if 0 not in self.unfit:
                self.log("val/ppl", self.val_ppl.compute())
                self.val_ppl.reset()
        self.unfit.clear()
        self._log_exact_match()
        self._log_samples()

    def _log_samples(self) -> None:
        tokenizer = getattr(self.trainer.datamodule, "tokenizer", None)
        experiment = getattr(self.logger, "experiment", None)
        if not self.sample_tokens or tokenizer is None or not hasattr(experiment, "add_text"):
            return
        budget = self.sample_tokens if self.arch.pos_encoding != "learned" else self.arch.max_seq_len - 1
        prompt = torch.full((3, 1), tokenizer.bos_id, device=self.device)
        generator = torch.Generator(device=self.device).manual_seed(self.trainer.global_step)
        out = self.base_model.generate(prompt, budget, self.sample_temperature, top_k=None, generator=generator)
        text = "\n\n".join(f"    {tokenizer.decode(row.tolist())}".replace("\n", "\n    ") for row in out)
        experiment.add_text("samples", text, self.global_step)
