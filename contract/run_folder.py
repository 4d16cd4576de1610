"""A run's folder and what passes between a sweep and its runs: the names both sides write and read.

<run>/config.yaml            the resolved config (Lightning's SaveConfigCallback)
<run>/run.json               `RunMetadata`: commit, versions, data checksum, counts, status (`run_record`)
<run>/tokenizer.json         the vocabulary the run trained with
<run>/checkpoints/last.ckpt  the resumption point (ModelCheckpoint's `save_last`)
<run>/run.log                the run's output, when a sweep ran it
<run>/git.diff               the uncommitted code of a run started from a dirty tree
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

RUN_JSON = "run.json"
CONFIG_FILE = "config.yaml"
TOKENIZER_FILE = "tokenizer.json"
CHECKPOINTS_DIR = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"
RUN_LOG = "run.log"
PATCH_NAME = "git.diff"

# `running` while it trains (and after an interruption, until it resumes); a run ends `done`, `diverged`
# (`DivergenceGuard`: a result, not a crash) or `failed` (a crash: written by the run when it sees its error, and the
# sweep's verdict on any run that crashed)
RunStatus = Literal["running", "done", "diverged", "failed"]
RUNNING, DONE, DIVERGED, FAILED = get_args(RunStatus)
FINISHED: tuple[RunStatus, ...] = (DONE, DIVERGED)  # a run in either state is never run again
ENDED: tuple[RunStatus, ...] = (DONE, DIVERGED, FAILED)  # the statuses a ledger row can hold

# `run.json`'s record of `cli.py test` on the run's checkpoint, and the prefix of the metrics it logs (test/*)
TEST_STAGE = "test"

# the sweep's folder: what runs write there is not a change of the code (`contract.git`)
SWEEP_DIR_VAR = "SWEEP_DIR"
# how a run shows progress: `lines` (one line per validation; what a sweep sets, so a run.log holds no bar
# redraws) or `bar`; unset: lines unless stdout is a terminal (`lit_modules.progress`)
PROGRESS_VAR = "SUITE_PROGRESS"
PROGRESS_LINES, PROGRESS_BAR = "lines", "bar"


def last_checkpoint(run_dir: Path) -> Path:
    """Where a run keeps its resumption point."""
    return Path(run_dir) / CHECKPOINTS_DIR / LAST_CHECKPOINT


def step_checkpoint(checkpoints: Path | str, step: int) -> Path:
    """A checkpoint kept at a step (a `horizons:` sweep's stable run, at each horizon's decay start) in the folder
    `checkpoints` (a run's `checkpoints/`)."""
    return Path(checkpoints) / f"step{step}.ckpt"
