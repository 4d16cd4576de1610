"""BERT-style masked language modelling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from models import ArchConfig, BertMLM
from models.config import IGNORE_INDEX, ConfigError

from .base import TaskModule
from .optim import OptimConfig
from .prediction_writer import check_top_k, datamodule_attr, listed, ranked, short


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
    generators: list[torch.Generator],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (inputs, labels); labels are `IGNORE_INDEX` except at selected positions. Special and
    padding tokens are never selected. Row i's draws come from `generators[i]` alone, so an example's
    masks do not depend on which batch, or which process, it lands in."""
    device = input_ids.device

    def draw() -> torch.Tensor:
        length = input_ids.shape[1]
        return torch.stack([torch.rand(length, generator=g, device=g.device) for g in generators]).to(device)

    maskable = ~torch.isin(input_ids, torch.tensor(special_ids, device=device))
    selected = (draw() < cfg.select) & maskable
    labels = input_ids.masked_fill(~selected, IGNORE_INDEX)
    roll = draw()
    to_mask = selected & (roll < cfg.mask)
    to_random = selected & (roll >= cfg.mask) & (roll < cfg.mask + cfg.random)
    random_tokens = (draw() * vocab_size).long()
    inputs = input_ids.masked_fill(to_mask, mask_id)
    inputs = torch.where(to_random, random_tokens, inputs)
    return inputs, labels


class MaskedLM(TaskModule):
    """Masked-token prediction; logs `val/loss` (MLM loss) and `val/acc` (masked-token accuracy).

    Masking is a pure function of (seed, split, sample index): every run of a seed sees the same
    masks, on 1 or N processes, and validation is identical across epochs.

    `cli.py predict` lists the `predict_top_k` most likely fills of every `<mask>` of an input, with their
    probabilities (special tokens are never fills) and the input filled with the first choices; an input
    with no `<mask>` gets its middle token masked (the record's `expected` is the token it hid).

    Args:
        masking: masking probabilities.
        seed: seed of the masking.
        predict_top_k: fills listed per `<mask>` by `cli.py predict`.
    """

    hparam_metrics = ("val/loss", "val/acc")
    predict_args = ("predict_top_k",)

    def __init__(
        self,
        arch: ArchConfig = ArchConfig(norm_placement="post", embedding_norm=True),
        optim: OptimConfig = OptimConfig(),
        data_info: dict[str, Any] | None = None,
        compile: bool = False,
        masking: MaskingConfig = MaskingConfig(),
        seed: int = 0,
        predict_top_k: int = 5,
        **finetune: Any,  # TaskModule's: init_from, init_replace, freeze, peft, quantize
    ):
        super().__init__(arch, optim, data_info, compile, **finetune)
        self.model = BertMLM(self.arch)
        self.masking, self.seed = masking, seed
        self.predict_top_k = check_top_k(predict_top_k)
        mask_id = self.data_info.get("mask_token_id", 1)
        if mask_id is None:
            raise ConfigError(
                "data: the tokenizer has no mask token (<mask> or [MASK]), which a masked LM needs; give a "
                "data.tokenizer_file that has one, or let the suite fit its own (data.tokenizer: bpe or char)"
            )
        self.mask_id = int(mask_id)
        self.special_ids = list(self.data_info.get("special_token_ids", [0, 1, 2, 3]))
        self.val_loss = MeanMetric()
        self.val_acc = MulticlassAccuracy(self.arch.vocab_size, average="micro", ignore_index=IGNORE_INDEX)

    def _step(self, batch: dict[str, torch.Tensor], split: int) -> tuple[torch.Tensor, torch.Tensor]:
        if "index" not in batch:
            raise KeyError("MaskedLM keys each example's masks by its sample index: batches need an `index` entry")
        keys = (self.seed * 1_000_003 + split * 1_000_000_007 + int(i) for i in batch["index"])
        generators = [torch.Generator().manual_seed(key) for key in keys]
        inputs, labels = mask_tokens(
            batch["input_ids"], self.masking, self.mask_id, self.arch.vocab_size, self.special_ids, generators
        )
        return self.model(inputs, batch.get("attention_mask")), labels

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.train_loss(*self._step(batch, split=0))

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        if dataloader_idx:  # text data offers extra lengths for causal LMs; MLM scores the first
            return
        logits, labels = self._step(batch, split=1)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
        self.val_loss.update(loss, weight=(labels != IGNORE_INDEX).sum())
        self.val_acc.update(logits.flatten(0, 1), labels.flatten())
        self.log(f"{self.eval_stage}/loss", self.val_loss, prog_bar=True, add_dataloader_idx=False)
        self.log(f"{self.eval_stage}/acc", self.val_acc, add_dataloader_idx=False)

    test_step = validation_step  # `cli.py test`: the same evaluation on the test split, logged as test/*

    def predict_step(self, batch: dict[str, list], batch_idx: int, dataloader_idx: int = 0) -> list[dict[str, Any]]:
        tokenizer = datamodule_attr(self, "tokenizer")
        return [self._fill(tokenizer, *item) for item in zip(batch["index"], batch["text"], batch["input_ids"])]

    def _fill(self, tokenizer, index: int, text: str, ids: list[int]) -> dict[str, Any]:
        limit = self.base_model.stack.pos.max_positions
        if limit is not None and len(ids) > limit:
            raise ConfigError(
                f"data.predict_file: input {index + 1} ({short(text, 60)!r}) has {len(ids)} tokens, more than the "
                f"{limit} positions of pos_encoding={self.arch.pos_encoding!r}; shorten it"
            )
        record: dict[str, Any] = {"index": int(index), "input": text}
        masked = [i for i, token in enumerate(ids) if token == self.mask_id]
        if not masked:  # the documented replacement: hide the middle token and see whether it comes back
            middle = len(ids) // 2
            before, hidden, after = ids[:middle], ids[middle : middle + 1], ids[middle + 1 :]
            record["input"] = tokenizer.decode(before) + tokenizer.mask_token + tokenizer.decode(after)
            record["expected"] = tokenizer.decode(hidden)
            ids, masked = [*before, self.mask_id, *after], [middle]
        logits = self.model(torch.tensor([ids], dtype=torch.long, device=self.device))[0, masked]
        probabilities = logits.float().softmax(-1)
        probabilities[:, self.special_ids] = 0  # no special token is a fill; the others keep their probabilities
        fills = [ranked(p, self.predict_top_k, "token", lambda i: tokenizer.decode([i])) for p in probabilities]
        record["output"] = [{"position": position, "fills": f} for position, f in zip(masked, fills)]
        filled = list(ids)
        for position, f in zip(masked, fills):
            filled[position] = f[0]["id"]
        return record | {"filled": tokenizer.decode(filled)}

    def predict_settings(self) -> dict[str, Any]:
        return {"top_k": self.predict_top_k}

    def describe_prediction(self, record: dict[str, Any]) -> str:
        fills = "; ".join(listed(mask["fills"], "token") for mask in record["output"])
        expected = f" (hid {record['expected']!r})" if "expected" in record else ""
        return f"{short(record['input'], 80)!r}{expected} -> {short(record['filled'], 80)!r}  [{fills}]"
