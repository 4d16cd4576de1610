"""Requeue at the time limit: what a `--launcher slurm` job runs, a command that submitit can checkpoint.

SLURM warns a job `signal_delay_s` before its time limit with SIGUSR2 (submitit's `--signal=USR2@N`), sent to every
process of the job: submitit's own process, the task (`experiments.sweep.task`) it runs and that task's
`cli.py fit`. Of the two ways to requeue, submitit's checkpointing, not Lightning's auto-requeue (SIGUSR1, an
`hpc_ckpt_N.ckpt` and `scontrol requeue` from inside the training process), is the one that composes with the
sweep: the job is submitit's, whose process would otherwise end the job on the warning, and the run's claim,
`submitted.json` and ledger are the task's, which the training process knows nothing of. So:

- the run (`lit_modules.callbacks.SaveWhenStopped`) saves `checkpoints/last.ckpt` after its step in progress and
  exits; the task leaves `submitted.json` naming its job (a sweep run meanwhile sees the run queued: it neither
  records nor submits it), releases its claim and exits 130 (interrupted);
- submitit calls `TaskCommand.checkpoint`, which waits for the task, and requeues the job with the same command
  (`scontrol requeue`: the same job id) unless the run has ended; the requeued job resumes the run from
  `last.ckpt` as any resumed run does, and the sweep records it once, when it has ended.

submitit requeues a job at most `slurm_max_num_timeout` times for its time limit (default
`experiments.sweep.launchers.slurm.SLURM_MAX_REQUEUES`); a preemption (warned well before the limit) does not count.
SLURM sends the warning up to ~30 s before `signal_delay_s` (its event loop's resolution).
"""

from __future__ import annotations

import io
import subprocess
from typing import Any

from submitit.core.utils import CommandFunction, DelayedSubmission, FailedJobError, copy_process_streams

ENDED = (0, 1)  # the task's exit status when its run ended (done, diverged, failed) or was another's to run


class TaskCommand(CommandFunction):
    """`CommandFunction` (the task's command; its output is the job's result) that submitit may checkpoint.

    Args:
        command: the task's command line, its run's JSON to come as the argument.
        cwd: where it runs (the repository root).
        wait_s: how long `checkpoint` waits for the warned task to save and exit (less than the warning's
            delay: the requeue must happen before SLURM ends the job).
    """

    def __init__(self, command: list[str], cwd: str, wait_s: float) -> None:
        super().__init__(command, verbose=True, cwd=cwd)
        self.wait_s = wait_s
        self._process: subprocess.Popen | None = None

    def __call__(self, *args: Any) -> str:
        """Runs the task (as `CommandFunction` does, keeping its process for `checkpoint`); returns its stdout."""
        command = [*self.command, *(str(a) for a in args)]
        stdout, stderr = io.StringIO(), io.StringIO()
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.cwd) as process:
            self._process = process
            try:
                copy_process_streams(process, stdout, stderr, self.verbose)
            except Exception as err:
                process.kill()
                raise FailedJobError("the task's streams broke") from err
            code = process.wait()
        if code:
            raise FailedJobError(stderr.getvalue().strip()) from subprocess.CalledProcessError(code, command)
        return stdout.getvalue().strip()

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__ | {"_process": None}  # submitit pickles the command to requeue, not its process

    def checkpoint(self, *args: Any) -> DelayedSubmission | None:
        """submitit's hook on the warning (in its signal handler): the same command again once the task has
        stopped, or None (no requeue) when the run ended meanwhile.

        The task got the warning too and stops its run; its exit status tells whether the run has ended. One
        still running after `wait_s` is requeued all the same: SLURM ends it, and the requeued job resumes from
        the last checkpoint it saved (its claim, of the same job, is taken over: `experiments.sweep.task`).
        """
        process = self._process
        if process is not None:
            try:
                if process.wait(timeout=self.wait_s) in ENDED:
                    return None
            except subprocess.TimeoutExpired:
                pass
        return DelayedSubmission(TaskCommand(self.command, str(self.cwd), self.wait_s), *args)
