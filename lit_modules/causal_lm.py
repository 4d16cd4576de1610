"""GPT language modelling, with validation at several context lengths (length extrapolation)."""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict
from typing import Any

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric, Metric
from torchmetrics.text import Perplexity

from models import GPT, ArchConfig
from models.config import IGNORE_INDEX, ConfigError

from .base import TaskModule
from .optim import OptimConfig
from .prediction_writer import Generation, datamodule_attr


class ExactMatchByLength(Metric):
    """Exact-match rate per instance length: sums of hits and counts in fixed-size vectors.

    Hand-written because torchmetrics has no grouped mean; fixed-size states (not one metric per
    length seen) keep every process's states the same shape, so DDP sums them.

    Args:
        max_length: the longest instance length counted.
    """

    def __init__(self, max_length: int) -> None:
        super().__init__()
        self.add_state("hits", torch.zeros(max_length + 1), dist_reduce_fx="sum")
        self.add_state("counts", torch.zeros(max_length + 1), dist_reduce_fx="sum")

    def update(self, correct: torch.Tensor, lengths: torch.Tensor) -> None:
        self.hits.index_add_(0, lengths, correct.to(self.hits.dtype))
        self.counts.index_add_(0, lengths, torch.ones_like(correct, dtype=self.counts.dtype))

    def compute(self) -> dict[int, torch.Tensor]:
        return {n: self.hits[n] / self.counts[n] for n in self.counts.nonzero().flatten().tolist()}


class CausalLM(TaskModule):
    """Next-token prediction.

    Validation runs one dataloader per evaluation length (the DataModule's `eval_lengths`, by
    default 1×, 2×, 4×, 8× the training length, over the same validation tokens) and logs
    `val/loss@<L>`; `val/loss`, `val/ppl` and `val/bpt` (bits per token; bits per character at
    character level) are taken at the first length. A length past the positional scheme's
    `max_positions` (a `learned` table's rows) gives `nan`.

    Batches with `lengths` (algorithmic tasks, loss on the answer only) also log exact-match
    accuracy per instance length, `val/exact_match@<n>`, and its means in and out of the training
    distribution (`val/exact_match_id`, `val/exact_match_ood`, split at data_info's
    `train_max_len`). All answer tokens right under teacher forcing is exactly the condition for
    greedy decoding to reproduce the answer, so no decoding loop is needed.

    `cli.py predict` continues prompts (the DataModule's `predict_dataloader`) as `generation` says,
    through the KV cache; with learned positions a continuation stops where the table ends, and a prompt
    that fills the table keeps its last tokens (the record's `note` says so).

    Args:
        sample_tokens: tokens sampled into TensorBoard at each validation (0: none).
        sample_temperature: sampling temperature.
        generation: how `cli.py predict` continues a prompt (`--model.generation.max_new_tokens 50`).
    """

    hparam_metrics = ("val/loss", "val/ppl")
    predict_args = ("generation",)

    def __init__(
        self,
        arch: ArchConfig = ArchConfig(),
        optim: OptimConfig = OptimConfig(),
        data_info: dict[str, Any] | None = None,
        compile: bool = False,
        sample_tokens: int = 200,
        sample_temperature: float = 0.8,
        generation: Generation = Generation(),
        **finetune: Any,  # TaskModule's: init_from, init_replace, freeze, peft, quantize
    ):
        super().__init__(arch, optim, data_info, compile, **finetune)
        self.model = GPT(self.arch)
        self.sample_tokens, self.sample_temperature = sample_tokens, sample_temperature
        self.generation = generation
        self.val_loss = torch.nn.ModuleList()  # one per evaluation length, made at the first validation
        self.val_names: dict[int, str | None] = {}
        self.unfit: set[int] = set()
        self.exact_match = ExactMatchByLength(int(self.data_info.get("max_len", self.arch.max_seq_len or 0)))
        self.val_ppl = Perplexity(ignore_index=IGNORE_INDEX)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model(batch["input_ids"])
        return F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=IGNORE_INDEX), logits

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.train_loss(self.model(batch["input_ids"]), batch["labels"])

    @property
    def max_positions(self) -> int | None:
        """The longest sequence the model's positional scheme supports; `None`: any length."""
        return self.base_model.stack.pos.max_positions

    def _fits(self, length: int) -> bool:
        return self.max_positions is None or length <= self.max_positions

    def on_validation_epoch_start(self) -> None:
        # every process makes every loader's metric, even one that gets no batch of it: their states
        # are summed over processes at the end
        loaders = self.trainer.num_test_batches if self.trainer.testing else self.trainer.num_val_batches
        while len(self.val_loss) < len(loaders):
            self.val_loss.append(MeanMetric().to(self.device))

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        length = batch["input_ids"].shape[1]
        # fixed-length windows are named by their length; padded variable-length data is not
        self.val_names.setdefault(dataloader_idx, None if "lengths" in batch else f"loss@{length}")
        if not self._fits(length):
            self.unfit.add(dataloader_idx)
            return
        loss, logits = self.loss(batch)
        self.val_loss[dataloader_idx].update(loss, weight=(batch["labels"] != IGNORE_INDEX).sum())
        if dataloader_idx == 0:
            self.val_ppl.update(logits, batch["labels"])
        if "lengths" in batch:
            correct = ((logits.argmax(-1) == batch["labels"]) | (batch["labels"] == IGNORE_INDEX)).all(dim=1)
            self.exact_match.update(correct, batch["lengths"])

    def _log_exact_match(self, scores: dict[int, torch.Tensor]) -> None:
        self.exact_match.reset()
        if not scores:
            return
        boundary = self.data_info.get("train_max_len")
        for n, value in scores.items():
            self.log(f"{self.eval_stage}/exact_match@{n}", value)
        self.log(f"{self.eval_stage}/exact_match", torch.stack(list(scores.values())).mean())
        if boundary is not None:
            for name, keep in (("id", lambda n: n <= boundary), ("ood", lambda n: n > boundary)):
                values = [v for n, v in scores.items() if keep(n)]
                if values:
                    self.log(f"{self.eval_stage}/exact_match_{name}", torch.stack(values).mean())

    def on_validation_epoch_end(self) -> None:
        # compute() syncs over processes, so every process calls it for every metric, in the same order
        # (also for a metric with no update: a length past `max_positions`, or one with no batch here)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*was called before the ``update`` method.*")
            losses = {idx: metric.compute() for idx, metric in enumerate(self.val_loss)}
            ppl = self.val_ppl.compute()
            scores = self.exact_match.compute()
        for metric in (*self.val_loss, self.val_ppl):
            metric.reset()
        unfit = [f"{self.eval_stage}/{self.val_names[idx]}" for idx in sorted(losses) if idx in self.unfit]
        if unfit and self.trainer.global_step == 0:  # once, for every length past the table
            warnings.warn(
                f"{', '.join(unfit)}: learned positions end at max_seq_len={self.max_positions}, so these are "
                "logged as nan; evaluate at lengths up to it (--data.eval_lengths) or use positions that extrapolate"
            )
        for idx in sorted(losses):
            if idx in self.unfit:
                losses[idx] = torch.tensor(math.nan, device=self.device)
            if self.val_names.get(idx):
                self.log(f"{self.eval_stage}/{self.val_names[idx]}", losses[idx])
        if losses:
            loss = losses[0]  # the first loader evaluates at the training length
            self.log(f"{self.eval_stage}/loss", loss, prog_bar=True)
            self.log(f"{self.eval_stage}/bpt", loss / math.log(2))
            if 0 not in self.unfit:
                self.log(f"{self.eval_stage}/ppl", ppl)
        self.unfit.clear()
        self._log_exact_match(scores)
        # sampling calls no collective; the trained weights' samples only
        if self.trainer.is_global_zero and not self.trainer.testing and not self.eval_suffix:
            self._log_samples()

    # `cli.py test`: the same evaluation on the data's test split, logged as test/* (`eval_stage`)
    on_test_epoch_start = on_validation_epoch_start
    test_step = validation_step
    on_test_epoch_end = on_validation_epoch_end

    def _log_samples(self) -> None:
        tokenizer = getattr(self.trainer.datamodule, "tokenizer", None)
        experiment = getattr(self.logger, "experiment", None)
        if not self.sample_tokens or tokenizer is None or not hasattr(experiment, "add_text"):
            return
        # a bounded scheme fills its positions after the 1-token prompt
        budget = self.sample_tokens if self.max_positions is None else self.max_positions - 1
        prompt = torch.full((3, 1), tokenizer.bos_id, device=self.device)
        generator = torch.Generator(device=self.device).manual_seed(self.trainer.global_step)
        out = self.base_model.generate(prompt, budget, self.sample_temperature, top_k=None, generator=generator)
        text = "\n\n".join(f"    {tokenizer.decode(row.tolist())}".replace("\n", "\n    ") for row in out)
        experiment.add_text("samples", text, self.global_step)

    def predict_step(self, batch: dict[str, list], batch_idx: int, dataloader_idx: int = 0) -> list[dict[str, Any]]:
        tokenizer = datamodule_attr(self, "tokenizer")
        return [self._continue(tokenizer, *item) for item in zip(batch["index"], batch["text"], batch["input_ids"])]

    def _continue(self, tokenizer, index: int, text: str, ids: list[int]) -> dict[str, Any]:
        if self.data_info.get("mask_token_id") in ids:
            raise ConfigError(
                f"data.predict_file: prompt {index + 1} ({text[:60]!r}) contains {tokenizer.mask_token}, which "
                "marks a masked-LM input; a GPT continues plain text: remove it"
            )
        settings, limit, notes = self.generation, self.max_positions, []
        if limit is not None and len(ids) >= limit:  # keep room for one new token in the learned table
            ids = ids[-(limit - 1) :]
            notes.append(f"prompt cut to its last {limit - 1} tokens")
        new = settings.max_new_tokens if limit is None else min(settings.max_new_tokens, limit - len(ids))
        if new < settings.max_new_tokens:
            notes.append(f"{new} new tokens: learned positions end at {limit}")
        # one generator per prompt, keyed by (seed, index): the same continuation in any batch, on any process
        generator = torch.Generator(device=self.device).manual_seed(settings.seed * 1_000_003 + int(index))
        prompt = torch.tensor([ids], dtype=torch.long, device=self.device)
        out = self.base_model.generate(prompt, new, settings.temperature, settings.top_k, generator=generator)
        record = {"index": int(index), "input": text, "output": tokenizer.decode(out[0, len(ids) :].tolist())}
        return record | ({"note": "; ".join(notes)} if notes else {})

    def predict_settings(self) -> dict[str, Any]:
        return asdict(self.generation)
