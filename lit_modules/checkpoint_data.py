"""A checkpoint is evaluated or resumed only on the data it was trained on: its tokenizer and its data-decided
values (`data_info`) must be the data's now, checked before its weights load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contract.errors import ConfigError
from contract.run_folder import TOKENIZER_FILE

from .tokenizer_check import check_tokenizer
from .trainer_paths import evaluated_run


def data_info_changes(trained: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """`vocab_size=98 in the checkpoint, 99 now` for each value both name and that differs."""
    canonical = lambda value: json.dumps(value, sort_keys=True)  # noqa: E731 (tuples and lists alike)
    return [
        f"{key}={trained[key]!r} in the checkpoint, {now[key]!r} now"
        for key in sorted(trained.keys() & now.keys())
        if canonical(trained[key]) != canonical(now[key])
    ]


class SameDataCheckpoints:
    """Mixin of `TaskModule` (`self._trainer`, `self.data_info`); keeps the loaded checkpoint's step
    (`checkpoint_step`: the trainer's `global_step` is 0 outside training)."""

    checkpoint_step: int | None = None

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuses a checkpoint trained on other data before its weights load (a vocabulary of another size
        would fail deep in `load_state_dict`): the run's `tokenizer.json` must equal the data's tokenizer,
        and the data-decided values (`data_info`) the checkpoint was trained with must be the data's now."""
        self.checkpoint_step = checkpoint.get("global_step")  # a test's record names the step it evaluated
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
