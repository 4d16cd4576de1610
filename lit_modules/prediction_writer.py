"""`cli.py predict`: the writer of `predictions.jsonl`, the settings of GPT's sampling, and the helpers the
task modules' `predict_step`s share (the k most likely ids, a record on one line).

Each task module's `predict_step` returns one record per input (`index`, `input`, `output`, and what else
its family has); the writer adds the settings and writes every record, in input order, to
`predictions.jsonl` in the run's folder (the folder of the checkpoint's run: `<run>/checkpoints/x.ckpt`
→ `<run>`; else the log folder), then prints a few of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

from contract.files import write_atomic
from models.config import ConfigError

from .trainer_paths import run_folder

PREDICTIONS_FILE = "predictions.jsonl"


@dataclass(frozen=True)
class Generation:
    """How a GPT continues a prompt in `cli.py predict` (`--model.generation.temperature 0`: greedy).

    Args:
        max_new_tokens: tokens generated after each prompt (fewer where learned positions end).
        temperature: softmax temperature; 0 takes the most likely token.
        top_k: sample among the k most likely tokens only; `None`: among all.
        seed: seeds the sampling; prompt i draws from its own generator (seed, i), so its continuation
            does not depend on the batch or the process it lands in.
    """

    max_new_tokens: int = 100
    temperature: float = 0.8
    top_k: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens={self.max_new_tokens} must be a positive integer")
        if not self.temperature >= 0:
            raise ConfigError(f"temperature={self.temperature} must be >= 0 (0: greedy)")
        if self.top_k is not None and self.top_k < 1:
            raise ConfigError(f"top_k={self.top_k} must be a positive integer, or null for no cut")


def check_top_k(top_k: int) -> int:
    """`top_k` of a classifier's predictions, validated (the field name is the module's `predict_top_k`)."""
    if top_k < 1:
        raise ConfigError(f"predict_top_k={top_k} must be a positive integer")
    return top_k


def datamodule_attr(module: pl.LightningModule, name: str) -> Any:
    """`name` of the trainer's DataModule (its tokenizer, class names): what turns ids back into words."""
    value = getattr(module.trainer.datamodule, name, None)
    if value is None:
        raise RuntimeError(
            f"{type(module).__name__}.predict_step needs the DataModule's `{name}`: call trainer.predict with "
            f"datamodule=..., as `cli.py predict` does"
        )
    return value


def ranked(probabilities: torch.Tensor, k: int, key: str, name: Callable[[int], str]) -> list[dict[str, Any]]:
    """(V,) probabilities → the k most likely as `{key: name(id), "id", "probability"}`, most likely first."""
    values, ids = probabilities.float().topk(min(k, probabilities.numel()))
    return [{key: name(i), "id": i, "probability": round(p, 4)} for p, i in zip(values.tolist(), ids.tolist())]


def listed(options: list[dict[str, Any]], key: str) -> str:
    """`'a' 0.41, 'e' 0.22` of `ranked`'s output, for a printout."""
    return ", ".join(f"{o[key]!r} {o['probability']:.2f}" for o in options)


def _gather(trainer: pl.Trainer, records: list[dict]) -> list[dict]:
    """Every process's records on every process. A collective: every process calls it."""
    if trainer.world_size == 1:
        return records
    parts: list[list[dict] | None] = [None] * trainer.world_size
    torch.distributed.all_gather_object(parts, records)
    return [record for part in parts for record in part or []]


class PredictionWriter(BasePredictionWriter):
    """Writes `predictions.jsonl` (one JSON record per input, in input order, with the settings) in the
    run's folder and prints the first `show` records; the task module attaches it when predicting.

    Under DDP every process predicts its share of the inputs; at the end all records are gathered (a
    collective every process calls) and the first process alone writes and prints.

    Args:
        show: records printed.
    """

    def __init__(self, show: int = 5):
        super().__init__(write_interval="epoch")
        self.show = show
        self.dir: Path | None = None

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.dir = run_folder(trainer)  # every process: it broadcasts the log folder

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices) -> None:
        records = _gather(trainer, [record for batch in predictions for record in batch])
        if not trainer.is_global_zero:  # one writer; no collective below this line
            return
        assert self.dir is not None, "PredictionWriter.on_predict_start has not run"
        records.sort(key=lambda record: record["index"])
        settings = {**pl_module.predict_settings(), "checkpoint": str(trainer.ckpt_path) if trainer.ckpt_path else None}
        if getattr(pl_module, "averaged_weights", False):  # --averaging.predict_with averaged
            settings["weights"] = "averaged"
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / PREDICTIONS_FILE
        write_atomic(path, "".join(json.dumps(r | {"settings": settings}, ensure_ascii=False) + "\n" for r in records))
        print(f"{len(records)} predictions in {path}")
        for record in records[: self.show]:
            print("  " + pl_module.describe_prediction(record).replace("\n", "\n    "))


def short(text: str, limit: int = 200) -> str:
    """`text` on one line for a printout: newlines shown as ⏎, cut at `limit` characters."""
    text = text.replace("\n", "⏎")
    return text if len(text) <= limit else text[: limit - 1] + "…"
