"""`DIR/results.csv`: one row per run, rewritten atomically after every run.

Rows are keyed by (cell, seed), so a resumed or retried run replaces its row instead of adding
one; the file is written to a temporary name and moved into place, so killing the sweep at any
moment leaves a complete file (the previous or the new one). Several sweeps may share a folder
(see `experiments.sweep.claims`): each adds its row to what is on disk at that moment, under a lock
(`DIR/.results.csv.lock`, `flock`), so no sweep's rows are lost to another's rewrite.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import math
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from contract.files import write_atomic
from contract.metrics import EVALUATION_PREFIXES, VALIDATION_PREFIXES
from contract.run_record import RUN_DIAGNOSTICS, RUN_STATS, RunRecordError, read_run_record
from experiments.records.values import format_value

HEAD = ("cell", "seed", "status")
# a tuned sweep's runs (experiments/sweep/tuning.py): the search chooses a cell's values, the final runs compare
PHASE_COLUMN, SEARCH_PHASE, FINAL_PHASE = "phase", "search", "final"
# a ladder's `tune.transfer`: the runs at the largest size that verify a transferred value (`<cell>~<point>`)
VERIFY_PHASE = "verify"
# a sweep's `horizons:` (experiments/sweep/horizons.py): per cell and seed a stable run, then a decay branch per
# horizon, whose row names its horizon (steps) and its parent (the stable run, `<cell>/seed<k>`)
STABLE_PHASE, BRANCH_PHASE = "stable", "branch"
HORIZON_COLUMN, PARENT_COLUMN = "horizon", "parent"
# a final run's tuned keys its search left open (comma-separated; empty: bracketed): a comparison touching the
# cell is inconclusive by rule. Ledgers before the column have none: the report then reads the edges itself
UNBRACKETED_COLUMN = "unbracketed"
SEARCH_MARK = "~"  # a search run's cell: `<cell>~<point>` (a folder beside the cell's own)
# params_trainable: what fine-tuning trains (PEFT, freezing); equal to params otherwise. Older ledgers lack it.
STATS = ("steps", "diverged_at_step", "loss_spikes", "wall_time_s", "step_time_ms", "params", "params_non_embedding",
         "params_trainable", "flops_per_token")  # fmt: skip
TIMINGS = ("wall_time_s", "step_time_ms")  # what the machine took: two identical runs differ only there
TAIL = ("git_commit", "error")  # git_commit: the run's code, from run.json (`-dirty`: see its git.diff)
# copied from run.json: RUN_STATS, and RUN_DIAGNOSTICS as `diagnostics/<name>` (contract.run_record)


def metric_sort_key(name: str) -> tuple:
    """train/* first, then val/*; `val/loss@64` before `val/loss@128`."""
    base, _, length = name.partition("@")
    return (not name.startswith("train/"), base, int(length) if length.isdigit() else -1, name)


# the evaluated stages' prefixes: the trained weights' and, with `--averaging.kind`, the average's (`val_avg/loss`)
EVAL_PREFIXES = EVALUATION_PREFIXES


def is_metric_column(name: str) -> bool:
    return name.startswith(("train/", *EVAL_PREFIXES))


def _number(value: float | None) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)  # repr: every digit survives
    return str(value)


def collect_row(
    run_dir: Path, cell: str, seed: int, status: str, error: str, axis_values: dict[str, Any]
) -> dict[str, str]:
    """A ledger row from what the run left in its folder: `run.json` and the event files.

    Metrics: the last finite value of every `val/*` (and `val_avg/*`) scalar, the last `train/loss`, and the
    `test/*` (and `test_avg/*`) metrics `run.json` records of the run's test (tuned sweeps evaluate their final
    runs); `git_commit` as the run recorded it (`-dirty` when its tree had uncommitted changes; empty when it
    never reached fit).

    Args:
        run_dir: `DIR/<cell>/seed<k>`.
        cell: the cell's name.
        seed: the run's seed.
        status: done, diverged or failed.
        error: last line of a failed run's error ('' otherwise).
        axis_values: the cell's value of every axis key.
    """
    from experiments.records.events import read_scalars  # TensorBoard: only where rows are made, not in jobs

    try:
        record = read_run_record(run_dir)  # None: the run never reached fit
    except RunRecordError:  # unreadable (its outcome, failed, says why): the row keeps what the events hold
        record = None
    scalars = read_scalars(run_dir)
    last_step = max((max(points) for points in scalars.curves.values() if points), default=None)
    row = {"cell": cell, "seed": str(seed), "status": status}
    row |= {key: format_value(value) for key, value in axis_values.items()}
    row |= {
        "steps": _number(record.steps if record and record.steps is not None else last_step),
        "diverged_at_step": _number(record and record.diverged_at_step),
        "wall_time_s": _number(round(scalars.wall_time_s, 3)),
    }
    row |= {key: _number(getattr(record, key, None)) for key in RUN_STATS}
    probe = record and record.diagnostics
    headlines = {key: getattr(probe, key) for key in RUN_DIAGNOSTICS if probe and getattr(probe, key) is not None}
    row |= {f"diagnostics/{key}": _number(value) for key, value in headlines.items()}
    for tag in scalars.curves:
        if tag.startswith(VALIDATION_PREFIXES):
            row[tag] = _number(scalars.last(tag, finite=True))
    if "train/loss" in scalars.curves:
        row["train/loss"] = _number(scalars.last("train/loss"))
    for tag, value in (record.test.metrics if record and record.test else {}).items():  # `cli.py test` of it
        row[tag] = _number(value)
    row["git_commit"] = record.git_commit if record else ""
    row["error"] = error
    return row


class Ledger:
    """The rows of `DIR/results.csv` by (cell, seed).

    Args:
        path: the CSV file; read if it exists.
        axes: the sweep's axis keys (columns after `status`).
    """

    def __init__(self, path: Path, axes: Iterable[str] = ()):
        self.path, self.axes = path, tuple(axes)
        self.rows: dict[tuple[str, int], dict[str, str]] = {}
        self.reload()

    def reload(self) -> None:
        """Reads the file again (other sweeps sharing the folder may have added rows)."""
        self.rows = {}
        if self.path.exists():
            with self.path.open(newline="") as f:
                for row in csv.DictReader(f):
                    self.rows[(row["cell"], int(row["seed"]))] = row

    def get(self, cell: str, seed: int) -> dict[str, str] | None:
        return self.rows.get((cell, seed))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One writer at a time among the sweeps sharing the folder (on NFS, Linux maps `flock` to a
        byte-range lock of the server)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.with_name(f".{self.path.name}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def put(self, row: dict[str, str], replaces: Callable[[dict[str, str] | None], bool] | None = None) -> None:
        """Adds or replaces the run's row and rewrites the file, keeping the rows other sweeps added; with
        `replaces`, only when it holds for the row there now (read under the lock: another sweep sharing the
        folder may have written the run since this one read the file)."""
        with self._locked():
            self.reload()
            key = (row["cell"], int(row["seed"]))
            if replaces is None or replaces(self.rows.get(key)):
                self.rows[key] = row
                self._write()

    def remove(self, cell: str, seed: int, when: Callable[[dict[str, str]], bool] | None = None) -> None:
        """Drops a run's row (a `horizons:` branch's row that said why it could not run, once it can) and rewrites
        the file, keeping the rows other sweeps added; with `when`, only if it holds for the row there now."""
        with self._locked():
            self.reload()
            row = self.rows.get((cell, seed))
            if row is not None and (when is None or when(row)):
                del self.rows[(cell, seed)]
                self._write()

    def columns(self) -> list[str]:
        present = {key for row in self.rows.values() for key in row}
        diagnostics = [f"diagnostics/{k}" for k in RUN_DIAGNOSTICS if f"diagnostics/{k}" in present]
        fixed = {*HEAD, *self.axes, *STATS, *diagnostics, *TAIL}
        metrics = sorted((k for k in present if is_metric_column(k) and k not in fixed), key=metric_sort_key)
        extra = sorted(k for k in present if k not in fixed and k not in metrics)  # axes of an older spec
        return [*HEAD, *self.axes, *extra, *STATS, *diagnostics, *metrics, *TAIL]

    def write(self) -> None:
        """Rewrites the file with exactly these rows (`--rerun` removes rows this way)."""
        with self._locked():
            self._write()

    def _write(self) -> None:
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=self.columns(), restval="")
        writer.writeheader()
        writer.writerows(self.rows.values())
        write_atomic(self.path, text.getvalue())  # a killed sweep leaves the old or the new file, whole
