"""Tiny sweeps for the experiment and tool tests: a 1-layer GPT of width 32 on 16-token windows of the
offline default corpus, 12 steps, validated every 4 and checkpointed every 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

BASE = ["configs/gpt/base.yaml", "configs/gpt/tiny.yaml"]
FIXED: dict[str, Any] = {
    "model.arch.d_model": 32,
    "model.arch.n_layers": 1,
    "model.arch.max_seq_len": 16,
    "model.sample_tokens": 0,
    "data.seq_len": 16,
    "data.batch_size": 8,
    "data.val_tokens": 256,
    "data.eval_lengths": [16, 32],
    "trainer.max_steps": 12,
    "trainer.val_check_interval": 4,
    "trainer.log_every_n_steps": 2,
    "trainer.num_sanity_val_steps": 0,
    "trainer.enable_model_summary": False,
    "divergence.max_loss": 20.0,  # lr 1e3 overshoots this within a step or two
}


def write_spec(path: Path, more_fixed: dict[str, Any] | None = None, **entries: Any) -> Path:
    """A spec file with the tiny base and fixed overrides (and `more_fixed`, e.g. trainer.devices),
    plus `entries` (grid/cells/seeds/launcher/...)."""
    spec = {"base": BASE, "fixed": FIXED | (more_fixed or {}), "checkpoint_every": 2} | entries
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def tiny_spec():
    """`write_spec(path, grid=..., seeds=...)`: a tiny sweep spec file."""
    return write_spec
