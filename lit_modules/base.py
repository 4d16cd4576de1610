"""What every task's LightningModule shares: optimiser, schedule, compile, run bookkeeping."""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contract.run_folder import TOKENIZER_FILE
from models import ArchConfig
from models.config import IGNORE_INDEX, ConfigError
from models.finetune import FreezePolicy, load_weights, read_weights, set_trainable
from models.peft import PeftConfig, trainable_parameters

from .int8 import Quantize, quantize_model
from .optim import OptimConfig, build_optimizer
from .prediction_writer import PredictionWriter, short
from .run_folder import evaluated_run
from .tokenizer_check import check_tokenizer

# Values logged at the end of an evaluation come from torchmetrics' compute(), which already sums
# every process's states; Lightning cannot know that and suggests sync_dist for each of them.
warnings.filterwarnings("ignore", message=".*when logging on epoch level in distributed setting.*")

# data_info keys naming the longest sequence the data feeds the model, in order: TextDataModule's
# window (`seq_len`); a translation pair's or an algorithmic instance's longest (`max_len`)
DATA_LENGTH_KEYS = ("seq_len", "max_len")


def data_length(data_info: dict[str, Any]) -> int | None:
    """The longest sequence the data feeds the model, if `data_info` names it."""
    return next((int(data_info[key]) for key in DATA_LENGTH_KEYS if key in data_info), None)


def data_info_changes(trained: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """`vocab_size=98 in the checkpoint, 99 now` for each value both name and that differs."""
    canonical = lambda value: json.dumps(value, sort_keys=True)  # noqa: E731 (tuples and lists alike)
    return [
        f"{key}={trained[key]!r} in the checkpoint, {now[key]!r} now"
        for key in sorted(trained.keys() & now.keys())
        if canonical(trained[key]) != canonical(now[key])
    ]


class TaskModule(pl.LightningModule):
    """Base of the four task modules.

    Subclasses build `self.model` from `self.arch` in `__init__` and list their headline metrics
    in `hparam_metrics` (shown in TensorBoard's HParams tab).

    Args:
        arch: the model architecture (every ablation axis is a field: `--model.arch.norm rmsnorm`).
        optim: optimiser and schedule.
        data_info: values the data decides (vocabulary size, special ids, image shape), linked
            in by the CLI from the DataModule; they override the matching `arch` fields, and an
            unset `arch.max_seq_len` becomes the data's longest sequence (`data_length`).
        compile: run the model through `torch.compile`.
        init_from: start from these weights: a suite checkpoint (`.ckpt` of a run, or a `.pt` state dict such
            as a merged export) or a transformers/timm model folder (`models.interop.from_reference`).
        init_replace: modules deliberately not loaded from `init_from` (a head for a new vocabulary or class
            count, e.g. `[lm_head, tok]`); they keep their initialisation and always train.
        freeze: base weights held fixed: `none`, `all`, `all_but_head`, `embeddings` (lookup tables);
            `auto` is `none`, or `all` with a PEFT method.
        peft: parameter-efficient fine-tuning (`--model.peft.method lora --model.peft.targets [q,v]`).
        quantize: `int8` evaluates (validate/test/predict, on CPU) with dynamic int8 Linear layers.
    """

    hparam_metrics: tuple[str, ...] = ("val/loss",)
    # settings of `cli.py predict` alone: not hyperparameters of the trained model. Kept out of the saved
    # hparams because LightningCLI (2.6) replaces the command line's values with a checkpoint's hparams
    # when `--ckpt_path` is given: saved, the training run's values would silently win.
    predict_args: tuple[str, ...] = ()
    # kept out of the saved hparams for the same reason, or because a checkpoint already holds what they give:
    # `init_from` (a run's checkpoint has its weights; the file may be gone by the time it is evaluated)
    _NOT_HPARAMS = ("init_from", "quantize")

    def __init__(
        self,
        arch: ArchConfig,
        optim: OptimConfig,
        data_info: dict[str, Any] | None = None,
        compile: bool = False,
        init_from: str | None = None,
        init_replace: tuple[str, ...] = (),
        freeze: FreezePolicy = "auto",
        peft: PeftConfig = PeftConfig(),
        quantize: Quantize = "none",
    ):
        super().__init__()
        self.data_info = dict(data_info or {})
        arch_fields = {k: v for k, v in self.data_info.items() if k in ArchConfig.__dataclass_fields__}
        if arch.max_seq_len is None and data_length(self.data_info) is not None:
            # the config wins; else text windows give the training length (a `learned` table ends there,
            # longer evaluation lengths score nan), pairs and algorithmic tasks their longest sequence
            arch_fields.setdefault("max_seq_len", data_length(self.data_info))
        self.arch = replace(arch, **arch_fields)
        self.optim = optim
        self.compile = compile
        self.init_from, self.init_replace, self.freeze = init_from, tuple(init_replace), freeze
        self.peft, self.quantize = peft, quantize
        self._tuned = False
        self.save_hyperparameters(ignore=[*self.predict_args, *self._NOT_HPARAMS])

    def configure_callbacks(self) -> list[pl.Callback]:
        # `cli.py predict` writes predictions.jsonl with no callback to configure
        trainer = self._trainer  # private (lit_modules.private_api): None when detached, where `trainer` raises
        return [PredictionWriter()] if trainer is not None and trainer.predicting else []

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuses a checkpoint trained on other data before its weights load (a vocabulary of another size
        would fail deep in `load_state_dict`): the run's `tokenizer.json` must equal the data's tokenizer,
        and the data-decided values (`data_info`) the checkpoint was trained with must be the data's now."""
        trainer = self._trainer
        run = evaluated_run(trainer) if trainer is not None else None
        if run is not None:
            check_tokenizer(trainer, run)  # every process: a collective
        changed = data_info_changes(checkpoint.get("hyper_parameters", {}).get("data_info") or {}, self.data_info)
        if changed:
            saved = run / TOKENIZER_FILE if run is not None else Path("<run>") / TOKENIZER_FILE
            raise ConfigError(
                f"data: the checkpoint was trained on other data: {'; '.join(changed)}. The data changed since the "
                f"run (a re-fitted vocabulary, another dataset); evaluate it on its own data, or with its "
                f"vocabulary: --data.tokenizer_file {saved}"
            )

    def predict_settings(self) -> dict[str, Any]:
        """The settings of `predict_step`, written with every prediction."""
        return {}

    def describe_prediction(self, record: dict[str, Any]) -> str:
        """One prediction on one line, for the printout of `cli.py predict`."""
        output = record["output"]
        return f"{short(record['input'], 80)!r} -> {short(output) if isinstance(output, str) else output}"

    def prepare_model(self) -> None:
        """Loads `init_from`, adds the PEFT method's parameters and sets which parameters train. Runs once,
        from `configure_model`: before a checkpoint is restored (a resumed or evaluated run's checkpoint holds
        the adapters, so they must exist) and before the optimiser is made."""
        if self._tuned:
            return
        self._tuned = True
        if self.init_from:
            load_weights(self.model, read_weights(self.init_from), self.init_replace, source=str(self.init_from))
        set_trainable(self.model, self.peft, self.freeze, self.init_replace)

    def setup(self, stage: str) -> None:
        if stage == "fit" and self.quantize != "none":
            raise ConfigError(
                f"model.quantize: {self.quantize} is post-training quantization: use it with cli.py validate, "
                "test or predict (with --ckpt_path), not fit"
            )

    def _quantize_for_evaluation(self) -> None:
        if self.quantize != "none" and not self.trainer.state.fn == "fit":
            self.model = quantize_model(self.base_model, self.quantize, self.device)

    @property
    def eval_stage(self) -> str:
        """The prefix of evaluation metrics: `test` under `cli.py test` (the data's test split), else `val`."""
        trainer = self._trainer
        return "test" if trainer is not None and trainer.testing else "val"

    def on_validation_start(self) -> None:
        self._quantize_for_evaluation()

    def on_test_start(self) -> None:
        self._quantize_for_evaluation()

    def on_predict_start(self) -> None:
        self._quantize_for_evaluation()

    def configure_model(self) -> None:
        self.prepare_model()
        if self.compile and not isinstance(self.model, torch._dynamo.eval_frame.OptimizedModule):
            self.model = torch.compile(self.model)

    def configure_optimizers(self):
        # the precision picks AdamW's kernel: Lightning cannot clip a fused AdamW's gradients under *-mixed
        trainer = self.trainer
        optimizer, schedule = build_optimizer(
            self.model, self.optim, trainer.estimated_stepping_batches, precision=trainer.precision
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def global_mean(self, total: Tensor, count: Tensor) -> Tensor:
        """`total / count` over the global batch: each process divides its own sum by the mean count
        per process, so DDP's gradient average is the gradient of the global batch's mean, however the
        labelled positions fall between processes. With one process, `total / count`.

        Called by every process at every training step (it is a collective under DDP).
        """
        count = count.detach().to(total.dtype)
        trainer = self._trainer
        if trainer is not None and trainer.world_size > 1:
            count = trainer.strategy.reduce(count, reduce_op="mean")
        return total / count.clamp_min(1)

    def train_loss(self, logits: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> Tensor:
        """Cross-entropy over the labelled positions of the global batch (`IGNORE_INDEX` skipped),
        logged as `train/loss` (the global batch's value, the same on 1 or N processes)."""
        total = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            labels.reshape(-1),
            ignore_index=IGNORE_INDEX,
            label_smoothing=label_smoothing,
            reduction="sum",
        )
        labelled = labels.reshape(-1) != IGNORE_INDEX
        loss = self.global_mean(total, labelled.sum())
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)
        return self.with_z_loss(loss, logits, labelled)

    def with_z_loss(self, loss: Tensor, logits: Tensor, labelled: Tensor | None = None) -> Tensor:
        """`loss` plus PaLM's z-loss (`optim.z_loss`): log Z of each labelled position's softmax, squared,
        averaged over the global batch like the loss, logged as `train/z_loss`. Every process calls it."""
        if not self.optim.z_loss:
            return loss
        log_z = logits.reshape(-1, logits.shape[-1]).float().logsumexp(-1)
        if labelled is None:
            labelled = torch.ones_like(log_z, dtype=torch.bool)
        z_loss = self.global_mean(log_z.square().masked_fill(~labelled, 0.0).sum(), labelled.sum())
        self.log("train/z_loss", z_loss, sync_dist=True)
        return loss + self.optim.z_loss * z_loss

    @property
    def base_model(self) -> nn.Module:
        return getattr(self.model, "_orig_mod", self.model)

    def model_stats(self) -> dict[str, float]:
        """Parameter counts and forward FLOPs, logged at start and written to the sweep ledger."""
        model = self.base_model
        return {
            "params": model.num_parameters(),
            "params_non_embedding": model.num_parameters(non_embedding=True),
            "params_trainable": trainable_parameters(model),  # what the fairness warning compares
            "flops_per_token": model.flops_per_token(self.stats_seq_len()),
        }

    def stats_seq_len(self) -> int:
        """The sequence length of the FLOP count: the data's training window, else `max_seq_len`."""
        length = self.data_info.get("seq_len", self.arch.max_seq_len)
        if length is None:
            raise ValueError("no sequence length to count FLOPs at: data_info has no seq_len and max_seq_len is unset")
        return int(length)

    def on_fit_start(self) -> None:
        stats = self.model_stats()
        for logger in self.loggers:
            flat = {f"arch/{k}": v for k, v in asdict(self.arch).items()}
            flat |= {f"optim/{k}": v for k, v in asdict(self.optim).items()} | stats
            # placeholders name the metrics the HParams tab shows; real values come from the run
            logger.log_hyperparams(flat, {m: math.nan for m in self.hparam_metrics})
            logger.log_metrics({f"model/{k}": float(v) for k, v in stats.items()}, step=0)
