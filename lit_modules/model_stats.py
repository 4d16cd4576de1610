"""What a run logs about its model at the start: parameter counts and FLOPs (also written to the sweep ledger),
and its hyperparameters for TensorBoard's HParams tab."""

from __future__ import annotations

import math
from dataclasses import asdict

from models.peft import trainable_parameters


class ModelStats:
    """Mixin of `TaskModule` (`self.base_model`, `self.arch`, `self.optim`, `self.data_info`, `self.loggers`,
    `self.hparam_metrics`)."""

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
