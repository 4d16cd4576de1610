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
        if length not in self.val_loss:
            self.val_loss[length] = MeanMetric().to(self.device)
        if not self._fits(length):
            return
        loss, logits = self.loss(batch)
        self.val_loss[length].update(loss, weight=(batch["labels"] != -100).sum())
        if dataloader_idx == 0:
            self.val_ppl.update(logits, batch["labels"])

    def on_validation_epoch_end(self) -> None:
        losses = {}
        for length in sorted(self.val_loss):
            if self._fits(length):
                losses[length] = self.val_loss[length].compute()
                self.val_loss[length].reset()
            else:
                if self.trainer.global_step == 0:
                    warnings.warn(
                        f"val/loss@{length}: learned positions end at max_seq_len={self.arch.max_seq_len}; logged as nan"
                    )
                losses[length] = torch.tensor(math.nan, device=self.device)
            self.log(f"val/loss@{length}", losses[length])
        if losses:
            loss = losses[min(losses)]  # the first evaluation length is the training length
            self.log("val/loss", loss, prog_bar=True)
            self.log("val/bpt", loss / math.log(2))
            if self._fits(min(losses)):
                self.log("val/ppl", self.val_ppl.compute())
                self.val_ppl.reset()
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
