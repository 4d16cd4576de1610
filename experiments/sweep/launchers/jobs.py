"""What the scheduler launchers (`local`, `slurm`) share: the function each job calls, and the runs to submit.

Every job runs `python -m experiments.sweep.task RUN_JSON` in the repository root (through
`submitit.helpers.CommandFunction`; a SLURM job's is `experiments.sweep.requeue.TaskCommand`, which it
unpickles in the repository root, `--chdir`): the same
`cli.py fit` command, claim and resumption as the pool (`experiments.sweep.task`). Job logs, pickles
and submission scripts go to `DIR/_submitit/`.
"""

from __future__ import annotations

import sys
from typing import Any

from experiments.records.ledger import Ledger
from experiments.sweep.claims import describe, read_claim
from experiments.sweep.recording import Recorder
from experiments.sweep.runner import CLAIMED, Outcome, plan
from experiments.sweep.runs import Run
from experiments.sweep.spec import ROOT

JOBS_DIR = "_submitit"
TASK = ["-m", "experiments.sweep.task"]  # after the interpreter: `python -m experiments.sweep.task RUN_JSON`


def task_function(requeue_wait_s: float | None = None) -> Any:
    """What each job calls: the task module, run in the repository root with the sweep's interpreter.

    Args:
        requeue_wait_s: a SLURM job's: requeued at its time limit (`experiments.sweep.requeue`), after waiting
            this long at most for its task to save and stop; None: not requeued (a local job).
    """
    import submitit

    if requeue_wait_s is None:
        return submitit.helpers.CommandFunction([sys.executable, *TASK], cwd=ROOT, verbose=True)
    from experiments.sweep.requeue import TaskCommand

    return TaskCommand([sys.executable, *TASK], cwd=str(ROOT), wait_s=requeue_wait_s)


def pending_runs(runs: list[Run], ledger: Ledger, retry_failed: bool, books: Recorder) -> list[Run]:
    """Records what ended, reports what others run, and returns the runs to submit."""
    actions = {run: plan(run, ledger, retry_failed) for run in runs}
    books.collect(actions)
    pending = []
    for run, action in actions.items():
        if action not in ("resume", "start"):
            continue
        holder = read_claim(run.dir)
        if holder is not None:
            books.record(run, Outcome(CLAIMED, describe(holder)))
        else:
            pending.append(run)
    return pending
