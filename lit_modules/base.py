"""What every task's LightningModule shares: its configuration, the optimiser and schedule, evaluation's stage and
predictions; each other concern is a mixin named for it (`SameDataCheckpoints`, `StartingWeights`, `Int8Evaluation`,
`GlobalLoss`, `ModelStats`)."""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import LearningRateMonitor
from torch import nn

from models import ArchConfig
from models.finetune import FreezePolicy
from models.peft import PeftConfig

from .checkpoint_data import SameDataCheckpoints
from .global_loss import GlobalLoss
from .int8 import Int8Evaluation, Quantize
from .model_stats import ModelStats
from .optim import OptimConfig, build_optimizer
from .prediction_writer import PredictionWriter, short
from .random_state import RandomStateCheckpoints
from .starting_weights import StartingWeights

# Values logged at the end of an evaluation come from torchmetrics' compute(), which already sums
# every process's states; Lightning cannot know that and suggests sync_dist for each of them.
warnings.filterwarnings("ignore", message=".*when logging on epoch level in distributed setting.*")

# data_info keys naming the longest sequence the data feeds the model, in order: TextDataModule's
# window (`seq_len`); a translation pair's or an algorithmic instance's longest (`max_len`)
DATA_LENGTH_KEYS = ("seq_len", "max_len")


def data_length(data_info: dict[str, Any]) -> int | None:
    """The longest sequence the data feeds the model, if `data_info` names it."""
    return next((int(data_info[key]) for key in DATA_LENGTH_KEYS if key in data_info), None)


class TaskModule(
    RandomStateCheckpoints,
    SameDataCheckpoints,
    StartingWeights,
    Int8Evaluation,
    GlobalLoss,
    ModelStats,
    pl.LightningModule,
):
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
    # `_avg` on the copy that `lit_modules.averaging.WeightAverage` keeps: its metrics are `val_avg/*`, `test_avg/*`
    eval_suffix: str = ""
    averaged_weights: bool = False  # `cli.py predict --averaging.predict_with averaged` loaded the average

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
        self.save_hyperparameters(ignore=[*self.predict_args, *self._NOT_HPARAMS])

    @classmethod
    def check_arguments(cls, args: dict[str, Any]) -> None:
        """The family's constraints on its arguments (`arch` and the rest, as parsed) that need no data; the CLI
        calls it right after parsing, so a sweep refuses a cell before any run (ViT: its positional schemes).

        Raises:
            ValueError: naming the argument and the valid choices.
        """

    def configure_callbacks(self) -> list[pl.Callback]:
        # `cli.py predict` writes predictions.jsonl with no callback to configure; every training run with a logger
        # logs each parameter group's learning rate per step (`lr-AdamW/pg1`, ...: the schedule as it ran)
        trainer = self._trainer  # private (lit_modules.private_api): None when detached, where `trainer` raises
        if trainer is None:
            return []
        if trainer.predicting:
            return [PredictionWriter()]
        return [LearningRateMonitor(logging_interval="step")] if trainer.training and trainer.loggers else []

    def predict_settings(self) -> dict[str, Any]:
        """The settings of `predict_step`, written with every prediction."""
        return {}

    def describe_prediction(self, record: dict[str, Any]) -> str:
        """One prediction on one line, for the printout of `cli.py predict`."""
        output = record["output"]
        return f"{short(record['input'], 80)!r} -> {short(output) if isinstance(output, str) else output}"

    @property
    def eval_stage(self) -> str:
        """The prefix of evaluation metrics: `test` under `cli.py test` (the data's test split), else `val`; with
        `eval_suffix` for the averaged weights (`val_avg`)."""
        trainer = self._trainer
        return ("test" if trainer is not None and trainer.testing else "val") + self.eval_suffix

    def configure_optimizers(self):
        # the precision picks AdamW's kernel: Lightning cannot clip a fused AdamW's gradients under *-mixed
        trainer = self.trainer
        optimizer, schedule = build_optimizer(
            self.model, self.optim, trainer.estimated_stepping_batches, precision=trainer.precision
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    @property
    def base_model(self) -> nn.Module:
        return getattr(self.model, "_orig_mod", self.model)
