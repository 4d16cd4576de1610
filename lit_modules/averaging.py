"""Weight averaging for every family (`--averaging.*`): an exponential moving average of the weights (EMA) or a
uniform average over the last fraction of training, kept beside the trained weights by Lightning's own
`WeightAveraging`, evaluated beside them (`val_avg/*`, `test_avg/*`), saved in the checkpoint, and used by
`cli.py predict` (`--averaging.predict_with averaged`) and `cli.py export` (`--weights averaged`) when asked.

Unlike Lightning's `EMAWeightAveraging` (the ViT recipe's), the averaged weights never replace the trained ones:
validation and test log the trained weights' metrics as without averaging (`val/*`, `test/*`) and the average's
under `val_avg/*`, `test_avg/*`; the checkpoint's `state_dict` stays the trained weights (what a resume, `test`,
`predict`, `export` and `init_from` read), the average goes beside it under `averaged_state_dict`, keyed alike.

The average is a copy of the whole task module (`AveragedModel` deep-copies it), so it evaluates itself with its
own metrics: the callback hands it each evaluation batch after the trained module's step, with the trainer's
precision context, and its `eval_suffix` (`_avg`) names what it logs. The copy is updated on every process
from identical replicas (no collective); its metrics sum over processes as the trained module's do.
"""

from __future__ import annotations

import math
import warnings
from contextlib import nullcontext
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import WeightAveraging
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from contract.errors import ConfigError
from contract.metrics import AVERAGED_SUFFIX

AveragingKind = Literal["none", "ema", "uniform"]
PredictWith = Literal["raw", "averaged"]
AVERAGED_STATE = "averaged_state_dict"  # checkpoint key: the average, keyed as `state_dict`
AVERAGING_INFO = "averaging"  # checkpoint key: the kind, its settings as resolved, and how many weights it averages
STAGES = {"validation": "val_step_context", "test": "test_step_context"}  # evaluation -> its precision context


def ema_decay(half_life_tokens: float, tokens_per_step: int) -> float:
    """The per-step decay whose weight halves every `half_life_tokens` trained tokens: 0.5^(tokens/step / half-life)."""
    return 0.5 ** (tokens_per_step / half_life_tokens)


def uniform_start(last_fraction: float, total_steps: int) -> int:
    """The 0-based index of the first optimizer step averaged: the last round(f·T) steps of T (at least one)."""
    return total_steps - max(1, round(last_fraction * total_steps))


def tokens_per_step(trainer: pl.Trainer, pl_module: pl.LightningModule) -> int:
    """Tokens an optimizer step trains on, as the suite's FLOP count has them: the global batch (every process)
    × gradient accumulation × the task's sequence length (`stats_seq_len`: the text window; a translation pair's
    `max_len`, padding included; a ViT's patch tokens)."""
    batch = getattr(trainer.datamodule, "global_batch_size", None)
    if batch is None:
        raise ConfigError(
            "averaging.half_life_tokens: the tokens per step come from the DataModule's global batch size, and this "
            "run has none; give averaging.decay instead"
        )
    return int(batch) * trainer.accumulate_grad_batches * int(pl_module.stats_seq_len())


def plain_key(key: str) -> str:
    """A state-dict key without torch.compile's wrapper (`model._orig_mod.x` -> `model.x`)."""
    return key.replace("._orig_mod.", ".", 1)


def load_by_name(module: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """`state` into `module` strictly, whichever of the two was compiled."""
    by_name = {plain_key(key): value for key, value in state.items()}
    module.load_state_dict({key: by_name[plain_key(key)] for key in module.state_dict() if plain_key(key) in by_name})


def averaged_weights(checkpoint: dict[str, Any], source: str = "the checkpoint") -> dict[str, torch.Tensor]:
    """A checkpoint's averaged weights, keyed as its `state_dict`. Lightning's own averaging callbacks (the ViT
    recipe's `EMAWeightAveraging`) save the average as the `state_dict` itself, the trained weights beside it.

    Raises:
        ConfigError: the checkpoint has no average (its run trained without `--averaging.kind`).
    """
    if AVERAGED_STATE in checkpoint:
        return checkpoint[AVERAGED_STATE]
    if "current_model_state" in checkpoint:
        return checkpoint["state_dict"]
    raise ConfigError(
        f"{source} has no averaged weights: its run trained without weight averaging (--averaging.kind ema or "
        "uniform), or saved it before its uniform average began; use its trained weights (the default)"
    )


class WeightAverage(WeightAveraging):
    """Weight averaging of a run, beside its trained weights (this module's docstring).

    Args:
        kind: `none` (no average; the callback does nothing), `ema` (a_t = d·a_(t-1) + (1-d)·w_t after each optimizer
            step, from a_1 = w_1) or `uniform` (the mean of the weights after each of the last `last_fraction` of the
            optimizer steps).
        decay: the EMA's per-step decay d (0 < d < 1); or `half_life_tokens`, not both.
        half_life_tokens: the EMA's half-life in trained tokens: d = 0.5^(tokens per step / half-life), the tokens
            per step as `tokens_per_step` counts them.
        last_fraction: the uniform average's share of training (0 < f <= 1) of the steps `trainer.max_steps` (or the
            epochs) give.
        predict_with: the weights `cli.py predict` runs: `raw` (trained) or `averaged` (the checkpoint's average).
    """

    def __init__(
        self,
        kind: AveragingKind = "none",
        decay: float | None = None,
        half_life_tokens: float | None = None,
        last_fraction: float | None = None,
        predict_with: PredictWith = "raw",
    ) -> None:
        super().__init__(use_buffers=False)  # buffers follow the trained model (masks, tables: not averaged)
        check_settings(kind, decay, half_life_tokens, last_fraction)
        self.kind, self.decay, self.half_life_tokens = kind, decay, half_life_tokens
        self.last_fraction, self.predict_with = last_fraction, predict_with
        self.tokens_per_step: int | None = None
        self.start_step: int | None = None  # the uniform average's first step index
        self._beside = False  # the average is evaluated in this evaluation

    @property
    def on(self) -> bool:
        return self.kind != "none"

    @property
    def average(self) -> pl.LightningModule | None:
        """The averaged copy of the task module, once it averages something."""
        model = self._average_model
        return model.module if model is not None and int(model.n_averaged) > 0 else None

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        if step_idx is None or not self.on:
            return False
        return self.kind == "ema" or step_idx >= (self.start_step if self.start_step is not None else math.inf)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not self.on or stage == "predict":
            return
        others = [type(c).__name__ for c in trainer.callbacks if isinstance(c, WeightAveraging) and c is not self]
        if others:
            raise ConfigError(
                f"averaging.kind={self.kind}: the run also has {others[0]} among trainer.callbacks; use one of them "
                "(--averaging.kind ema --averaging.decay D reports the average beside the trained weights)"
            )
        if stage == "fit" and self.kind == "ema" and self.half_life_tokens is not None:
            self.tokens_per_step = tokens_per_step(trainer, pl_module)
            self.decay = ema_decay(self.half_life_tokens, self.tokens_per_step)
        if self._average_model is None:
            # the module as it trains (init_from loaded, PEFT added), not yet compiled: the copy evaluates eagerly
            prepare = getattr(pl_module, "prepare_model", None)
            prepare() if prepare is not None else pl_module.configure_model()
            average = AveragedModel(pl_module, use_buffers=False, multi_avg_fn=self._multi_avg_fn())
            average.module.eval_suffix = AVERAGED_SUFFIX
            self._average_model = average

    def _multi_avg_fn(self):
        if self.kind != "ema":
            return None  # AveragedModel's default: the uniform running mean
        return lambda averaged, current, n: get_ema_multi_avg_fn(self.decay)(averaged, current, n)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._follow(pl_module)

    def _follow(self, pl_module: pl.LightningModule) -> None:
        """The copy on the trained module's device and in its dtype: the strategy moved the module after `setup`
        (and a `*-true` precision converted it)."""
        if self._average_model is not None:
            self._average_model.to(pl_module.device, next(pl_module.parameters()).dtype)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.kind == "uniform":
            total = trainer.estimated_stepping_batches
            if not math.isfinite(total):
                raise ConfigError("averaging.kind=uniform: set trainer.max_steps (or max_epochs) to place its start")
            self.start_step = uniform_start(self.last_fraction, int(total))

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.predict_with == "averaged" and not getattr(pl_module, "averaged_weights", False):
            raise ConfigError("averaging.predict_with=averaged: the average is a checkpoint's; give --ckpt_path")

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pass  # the trained weights stay in the module (Lightning's copies the average over them)

    # evaluation: the trained module's hooks run as without averaging; the average's run beside them
    def _start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._beside = self.on and self.average is not None
        if self._beside:
            self._follow(pl_module)
            self.average._metric_attributes = None  # `log`'s cache of its metrics' names, deep-copied: the module's
            self._call(trainer, f"on_{stage}_start")
        elif self.on and trainer.state.fn != "fit":
            prefix = "test" if stage == "test" else "val"
            warnings.warn(f"averaging: the checkpoint has no averaged weights; {prefix}{AVERAGED_SUFFIX}/* not logged")

    def _call(self, trainer: pl.Trainer, hook: str, *args: Any, context: Any = None, **kwargs: Any) -> None:
        """The averaged module's `hook`, as the trainer would call it (its `self.log` goes to this evaluation)."""
        module = self.average
        module.trainer, module._current_fx_name = trainer, hook
        try:
            with context or nullcontext():
                getattr(module, hook)(*args, **kwargs)
        finally:
            module._current_fx_name = None
            module.trainer = None

    def _step(self, trainer: pl.Trainer, stage: str, batch: Any, batch_idx: int, dataloader_idx: int) -> None:
        if not self._beside:
            return
        loaders = trainer.num_test_batches if trainer.testing else trainer.num_val_batches
        extra = {"dataloader_idx": dataloader_idx} if len(loaders) > 1 else {}  # as Lightning passes it
        context = getattr(trainer.precision_plugin, STAGES[stage])()
        hook = "test_step" if stage == "test" else "validation_step"
        self._call(trainer, hook, batch, batch_idx, context=context, **extra)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start(trainer, pl_module, "validation")

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._beside:
            self._call(trainer, "on_validation_epoch_start")

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._step(trainer, "validation", batch, batch_idx, dataloader_idx)

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._beside:
            self._call(trainer, "on_validation_epoch_end")

    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start(trainer, pl_module, "test")

    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._beside:
            self._call(trainer, "on_test_epoch_start")

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._step(trainer, "test", batch, batch_idx, dataloader_idx)

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._beside:
            self._call(trainer, "on_test_epoch_end")

    # the checkpoint: `state_dict` stays the trained weights; the average beside it
    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() if self.on else {}  # a run without averaging saves no state

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        if not self.on or self._average_model is None:
            return
        if self.average is not None:  # none yet: a uniform average before its first step
            averaged = {plain_key(key): value for key, value in self.average.state_dict().items()}
            checkpoint[AVERAGED_STATE] = {key: averaged[plain_key(key)] for key in checkpoint["state_dict"]}
        checkpoint[AVERAGING_INFO] = {
            "kind": self.kind,
            "decay": self.decay,
            "half_life_tokens": self.half_life_tokens,
            "tokens_per_step": self.tokens_per_step,
            "last_fraction": self.last_fraction,
            "start_step": self.start_step,
            "n_averaged": int(self._average_model.n_averaged),
        }

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        if trainer.state.fn == "predict":
            if self.predict_with == "averaged":  # the trained weights are loaded; the average replaces them
                load_by_name(pl_module, averaged_weights(checkpoint, f"--ckpt_path {trainer.ckpt_path}"))
                pl_module.averaged_weights = True
            return
        if not self.on or self._average_model is None:
            return
        if AVERAGED_STATE not in checkpoint:
            if trainer.state.fn == "fit" and AVERAGING_INFO not in checkpoint:
                warnings.warn("averaging: the checkpoint's run did not average its weights; the average starts here")
            return
        load_by_name(self._average_model.module, checkpoint[AVERAGED_STATE])
        self._average_model.n_averaged.fill_(checkpoint[AVERAGING_INFO]["n_averaged"])


def check_settings(kind: str, decay: float | None, half_life_tokens: float | None, last_fraction: float | None) -> None:
    """Raises ConfigError for settings the kind cannot use (`none` ignores every setting)."""
    if kind == "ema":
        if (decay is None) == (half_life_tokens is None):
            raise ConfigError("averaging.kind=ema: give one of averaging.decay and averaging.half_life_tokens")
        if decay is not None and not 0.0 < decay < 1.0:
            raise ConfigError(f"averaging.decay={decay} must be in (0, 1) (0.999: about the last 1,000 steps)")
        if half_life_tokens is not None and not half_life_tokens > 0:
            raise ConfigError(f"averaging.half_life_tokens={half_life_tokens} must be positive")
        if last_fraction is not None:
            raise ConfigError("averaging.last_fraction is the uniform average's; averaging.kind=ema does not use it")
    if kind == "uniform":
        if last_fraction is None or not 0.0 < last_fraction <= 1.0:
            raise ConfigError(f"averaging.kind=uniform: averaging.last_fraction={last_fraction} must be in (0, 1]")
        if decay is not None or half_life_tokens is not None:
            raise ConfigError("averaging.kind=uniform averages equally: unset averaging.decay and half_life_tokens")
