"""Tiny sweeps for the experiment and tool tests: a 1-layer GPT of width 32 on 16-token windows of the
offline default corpus, 12 steps, validated every 4 and checkpointed every 2."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

# `make test` runs the tests in parallel (pytest-xdist, one worker per core): each worker and the processes
# it starts get an equal share of the cores, since torch's default (every core per process) oversubscribes
# them, and torch's spinning threads then wait on each other. Results do not depend on it: a test that
# compares two runs runs both in the same environment.
if workers := os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // int(workers))))
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# The files that spend most of their time in subprocesses (DDP, sweeps, SLURM, the benchmark's smoke run), the
# longest first (`--durations`). `make test` hands whole files to its workers (`--dist loadfile`: a file's
# fixtures are built once), and these go first so that the suite does not end waiting on one of them.
LONG_FILES_FIRST = (
    "test_sweep_runs.py",
    "test_ddp.py",
    "test_fsdp.py",
    "test_fsdp_sweep.py",
    "test_plugins_runs.py",
    "test_tuned_sweep.py",
    "test_ladder_transfer_sweep.py",
    "test_horizons_sweep.py",
    "test_horizons_branch.py",
    "test_slurm_cluster.py",
    "test_bench.py",
    "test_predict.py",
    "test_gpu_check.py",
    "test_cli_entry.py",
    "test_translation.py",
    "test_samples.py",
)


# `make check`, the inner loop, runs the tests not marked `long`: a file is long when it trains or starts another
# process (its source calls one of these), or when it is named below (seconds of computation: bootstrap fits,
# DataLoader workers, every spec parsed, every dataset's batches hashed)
STARTS_TRAINING_OR_A_PROCESS = re.compile(
    r"subprocess|Popen|Trainer\(|\.fit\(|cli\.main\(|cli_main\(|sweep\.main\(|run_sweep\(|\bmain\(\["
)
LONG_FILES = ("test_ladder_fit.py", "test_data_base.py", "test_same_sweep.py", "test_data_fingerprints.py",
              "test_data_translation.py", "test_relative_bias.py", "test_t5_bias.py", "test_encoder_decoder.py",
              "test_test_splits.py", "test_sharding_section.py")  # fmt: skip


@functools.cache
def is_long(path: Path) -> bool:
    return path.name in LONG_FILES or bool(STARTS_TRAINING_OR_A_PROCESS.search(path.read_text()))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name.startswith("test_") and is_long(item.path):
            item.add_marker(pytest.mark.long)
    rank = {name: i for i, name in enumerate(LONG_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file keeps its order


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
