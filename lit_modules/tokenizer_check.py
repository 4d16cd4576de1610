"""The run folder's `tokenizer.json` pins a run's vocabulary: saved when training starts, checked against
the data's when a run resumes or a checkpoint is evaluated."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import lightning.pytorch as pl

from contract.errors import ConfigError
from contract.files import write_atomic
from contract.run_folder import TOKENIZER_FILE


def _canonical(data: object) -> str:
    return json.dumps(data, sort_keys=True, ensure_ascii=False)


def _summary(data: dict) -> str:
    """`char, 98 tokens, sha256 1a2b3c4d5e6f` of a tokenizer's `to_dict()`."""
    count = f", {len(data['tokens'])} tokens" if isinstance(data.get("tokens"), list) else ""
    return f"{data.get('kind')}{count}, sha256 {hashlib.sha256(_canonical(data).encode()).hexdigest()[:12]}"


def tokenizer_problem(saved: Path, datamodule: object) -> str | None:
    """Why the run's saved tokenizer and the data's disagree; `None` when they agree, or when the run saved
    none or the data has no tokenizer (images, generated tasks: their vocabulary is fixed by the code)."""
    tokenizer = getattr(datamodule, "tokenizer", None)
    if not hasattr(tokenizer, "to_dict") or not saved.is_file():
        return None
    try:
        theirs = json.loads(saved.read_text(encoding="utf-8"))
    except ValueError as e:
        return f"data: the run's tokenizer {saved} is not valid JSON ({e}); restore it from a copy of the run"
    ours = tokenizer.to_dict()
    if _canonical(ours) == _canonical(theirs):
        return None
    first = ""
    if isinstance(ours.get("tokens"), list) and isinstance(theirs.get("tokens"), list):
        diff = next((i for i, (a, b) in enumerate(zip(theirs["tokens"], ours["tokens"])) if a != b), None)
        if diff is not None:
            first = f", first at id {diff}: {theirs['tokens'][diff]!r} (run) vs {ours['tokens'][diff]!r} (data)"
    return (
        f"data: the run's tokenizer {saved} ({_summary(theirs)}) and the data's tokenizer "
        f"({type(datamodule).__name__}: {_summary(ours)}) differ{first}. The text the vocabulary is fitted on "
        f"changed since the run (the default corpus is Python's own documentation, which changes with the Python "
        f"release). Predict or evaluate with the run's vocabulary: --data.tokenizer_file {saved}; train on the "
        f"new data in a new folder."
    )


def check_tokenizer(trainer: pl.Trainer, folder: Path, save: bool = False) -> None:
    """Raises if `folder/tokenizer.json` and the data's tokenizer differ; with `save`, writes the data's
    there when the run has none yet. The first process reads and writes, and its verdict is broadcast so
    every process stops together: a collective, called on every process."""
    problem = None
    if trainer.is_global_zero:
        saved = folder / TOKENIZER_FILE
        problem = tokenizer_problem(saved, trainer.datamodule)
        tokenizer = getattr(trainer.datamodule, "tokenizer", None)
        if save and problem is None and hasattr(tokenizer, "to_dict") and not saved.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            write_atomic(saved, json.dumps(tokenizer.to_dict(), ensure_ascii=False, indent=1))
    problem = trainer.strategy.broadcast(problem)
    if problem:
        raise ConfigError(problem)  # the user's to fix: one line from cli.py, no traceback
