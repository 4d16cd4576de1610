"""The command line of every run of a sweep: an ordinary `cli.py fit`, logging into its own folder.

DIR/<cell>/seed<k>/          TensorBoard events, config.yaml, run.json, run.log; git.diff from a dirty tree
DIR/<cell>/seed<k>/checkpoints/last.ckpt   resumption point, every `checkpoint_every` steps
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from contract.run_folder import CONFIG_FILE, PROGRESS_LINES, PROGRESS_VAR, SWEEP_DIR_VAR, last_checkpoint
from experiments.records.ledger import SEARCH_MARK
from experiments.sweep.spec import ROOT

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # torch sets its intra-op threads from these


def available_cores() -> int:
    """Cores this process may use (respects taskset / cgroup CPU sets, unlike `os.cpu_count`)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class Run:
    """One (cell, seed) of a sweep.

    Args:
        cell: the cell's name; a tuned sweep's search runs are `<cell>~<point>` (`base_cell` is `<cell>`).
        seed: the run's seed.
        dir: `DIR/<cell>/seed<k>`, where Lightning logs, saves `config.yaml` and checkpoints.
        args: the arguments after `cli.py fit`, except `--ckpt_path`.
        threads: torch threads of each of its processes (`OMP_NUM_THREADS`).
        columns: ledger columns the run adds to its cell's axis values (a tuned sweep's phase and values).
        evaluate: after training, evaluate the last checkpoint on the test split (`cli.py test`).
        start_from: a checkpoint the run starts from when it has none of its own (a `horizons:` sweep's decay
            branch: its stable run's state at the branch's decay start); None: from scratch.
    """

    cell: str
    seed: int
    dir: Path
    args: tuple[str, ...]
    threads: int
    columns: tuple[tuple[str, str], ...] = ()
    evaluate: bool = False
    start_from: Path | None = None

    @property
    def name(self) -> str:
        return f"{self.cell}/seed{self.seed}"

    @property
    def base_cell(self) -> str:
        return self.cell.partition(SEARCH_MARK)[0]

    @property
    def checkpoint(self) -> Path:
        return last_checkpoint(self.dir)

    @property
    def sweep_dir(self) -> Path:
        return self.dir.parent.parent  # DIR of DIR/<cell>/seed<k>

    def argv(self, resume: bool = False) -> list[str]:
        start = self.checkpoint if resume else self.start_from
        resume_args = [f"--ckpt_path={start}"] if start else []
        return [sys.executable, "cli.py", "fit", *self.args, *resume_args]

    def test_argv(self) -> list[str]:
        """`cli.py test` of the run's last checkpoint with its own config: the test split, logged beside it."""
        config = ["--config", str(self.dir / CONFIG_FILE), f"--ckpt_path={self.checkpoint}"]
        return [sys.executable, "cli.py", "test", *config]

    def env(self) -> dict[str, str]:
        threads = {var: str(self.threads) for var in THREAD_VARS}
        return threads | {SWEEP_DIR_VAR: str(self.sweep_dir), PROGRESS_VAR: PROGRESS_LINES}

    def shell(self, resume: bool = False) -> str:
        """The same run as one shell line (what `--dry-run` prints, e.g. for a SLURM array)."""
        return self.shell_of(self.argv(resume))

    def shell_of(self, argv: list[str]) -> str:
        """One of the run's commands as a shell line, in its environment."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env().items())
        return f"cd {shlex.quote(str(ROOT))} && {env} {shlex.join(argv)}"

    def to_json(self) -> str:
        """The run as one JSON argument (what a scheduler job gets: `python -m experiments.sweep.task JSON`)."""
        return json.dumps(
            {
                "cell": self.cell,
                "seed": self.seed,
                "dir": str(self.dir),
                "args": self.args,
                "threads": self.threads,
                "columns": self.columns,
                "evaluate": self.evaluate,
            }
            | ({"start_from": str(self.start_from)} if self.start_from else {})
        )

    @classmethod
    def from_json(cls, text: str) -> Run:
        data = json.loads(text)
        columns = tuple(tuple(pair) for pair in data.get("columns", ()))
        start = Path(data["start_from"]) if data.get("start_from") else None
        return cls(data["cell"], data["seed"], Path(data["dir"]), tuple(data["args"]), data["threads"], columns,
                   data.get("evaluate", False), start)  # fmt: skip
