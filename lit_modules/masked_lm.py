"""BERT-style masked language modelling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from models import ArchConfig, BertMLM

from .base import TaskModule
from .optim import OptimConfig


@dataclass(frozen=True)
class MaskingConfig:
    """BERT's masking (Devlin et al. 2019): `select` of the tokens are predicted; of those,
    `mask` become [MASK], `random` a random token, the rest stay unchanged."""

    select: float = 0.15
    mask: float = 0.8
    random: float = 0.1


def mask_tokens(
    input_ids: torch.Tensor,
    cfg: MaskingConfig,
    mask_id: int,
    vocab_size: int,
    special_ids: list[int],
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (inputs, labels); labels are -100 except at selected positions. Special and
    padding tokens are never selected."""
    device = input_ids.device

    def draw(shape) -> torch.Tensor:
        return torch.rand(shape, generator=generator, device=generator.device).to(device)

    maskable = ~torch.isin(input_ids, torch.tensor(special_ids, device=device))
    selected = (draw(input_ids.shape) < cfg.select) & maskable
    labels = input_ids.masked_fill(~selected, -100)
    roll = draw(input_ids.shape)
    to_mask = selected & (roll < cfg.mask)
    to_random = selected & (roll >= cfg.mask) & (roll < cfg.mask + cfg.random)
    random_tokens = (draw(input_ids.shape) * vocab_size).long()
    inputs = input_ids.masked_fill(to_mask, mask_id)
    inputs = torch.where(to_random, random_tokens, inputs)
    return inputs, labels


class MaskedLM(TaskModule):
    """Masked-token prediction; logs `val/loss` (MLM loss) and `val/acc` (masked-token accuracy).

    Masking is a pure function of (seed, step) in training and of the batch index in validation,
    so every run of a seed sees the same masks and validation is identical across epochs.

    Args:
        masking: masking probabilities.
        seed: seed of the masking.
    """

    hparam_metrics = ("val/loss", "val/acc")

    def __init__(
        self,
        arch: ArchConfig = ArchConfig(norm_placement="post", embedding_norm=True),
        optim: OptimConfig = OptimConfig(),
        data_info: dict[str, Any] | None = None,
        compile: bool = False,
        masking: MaskingConfig = MaskingConfig(),
        seed: int = 0,
    ):
        super().__init__(arch, optim, data_info, compile)
        self.model = BertMLM(self.arch)
        self.masking, self.seed = masking, seed
        self.mask_id = int(self.data_info.get("mask_token_id", 1))
        self.special_ids = list(self.data_info.get("special_token_ids", [0, 1, 2, 3]))
        self.val_loss = MeanMetric()
        self.val_acc = MulticlassAccuracy(self.arch.vocab_size, average="micro", ignore_index=-100)

    def _step(self, batch: dict[str, torch.Tensor], key: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + key)
        inputs, labels = mask_tokens(
            batch["input_ids"], self.masking, self.mask_id, self.arch.vocab_size, self.special_ids, generator
        )
        logits = self.model(inputs, batch.get("attention_mask"))
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100), logits, labels

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss, _, _ = self._step(batch, self.global_step)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        if dataloader_idx:  # text data offers extra lengths for causal LMs; MLM scores the first
            return
        loss, logits, labels = self._step(batch, -1 - batch_idx)
        self.val_loss.update(loss, weight=(labels != -100).sum())
        self.val_acc.update(logits.flatten(0, 1), labels.flatten())
        self.log("val/loss", self.val_loss, prog_bar=True, add_dataloader_idx=False)
        self.log("val/acc", self.val_acc, add_dataloader_idx=False)
