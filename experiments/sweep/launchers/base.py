"""What every launcher is: one protocol carrying its facts, so the sweep command never asks for a name."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from experiments.records.ledger import Ledger
from experiments.sweep.resources import threads_per_process
from experiments.sweep.runs import Run, available_cores
from experiments.sweep.spec import Spec, SpecError
from experiments.sweep.spec_blocks import LauncherOptions

if TYPE_CHECKING:  # validate imports Lightning: a launcher (and a scheduler job) must not
    from experiments.sweep.validate import CheckedCell


@dataclass(frozen=True)
class Launch:
    """The runs to bring to an end, and how.

    Args:
        runs: all runs of the sweep, in order (finished ones are skipped, ended ones collected).
        ledger: `results.csv`.
        axis_values: each cell's value of every axis key (ledger columns).
        jobs: runs at a time (launchers on this machine).
        retry_failed: run the runs recorded as failed again.
        out_dir: the sweep's folder.
        block: the spec's `launcher:` block.
        parameters: each cell's job parameters (`Launcher.job_parameters`), by cell name.
        warm: fork runs from a warm process (the pool).
    """

    runs: list[Run]
    ledger: Ledger
    axis_values: dict[str, dict[str, Any]]
    jobs: int
    retry_failed: bool
    out_dir: Path
    block: LauncherOptions = field(default_factory=LauncherOptions)
    parameters: dict[str, dict[str, Any]] = field(default_factory=dict)
    warm: bool = True


@dataclass(frozen=True)
class Launched:
    """Args:
    claimed: the runs left to other live processes, each with its claim's description.
    submitted: runs handed to a scheduler that will run them after this command returns.
    """

    claimed: list[tuple[Run, str]]
    submitted: int = 0


class Launcher(Protocol):
    name: str
    help: str
    on_this_machine: bool  # its runs share this machine's cores (`--jobs`); else a scheduler places them
    waits: bool  # returns once its runs have ended (the sweep then reports); else it submits and returns

    def threads(self, spec: Spec, checked: dict[str, CheckedCell], threads: int | None, jobs: int) -> dict[str, int]:
        """Torch threads of each process of a cell's runs, by cell name."""
        ...

    def job_parameters(
        self, spec: Spec, checked: dict[str, CheckedCell], threads: dict[str, int], dry_run: bool
    ) -> dict[str, dict[str, Any]]:
        """Each cell's job parameters (empty when there is no job to describe).

        Raises:
            SpecError: the runs cannot go this way (a multi-node run on one machine, a block that contradicts them).
        """
        ...

    def launch(self, launch: Launch) -> Launched: ...


class OnThisMachine:
    """A launcher whose runs' processes all run on this machine, sharing its cores."""

    name: str
    on_this_machine = True
    waits = True

    def threads(self, spec: Spec, checked: dict[str, CheckedCell], threads: int | None, jobs: int) -> dict[str, int]:
        """`--threads`, else the cores shared by `jobs` runs of that cell's processes each."""
        cores = available_cores()
        return {name: threads or threads_per_process(cores, jobs, c.shape.processes()) for name, c in checked.items()}

    def job_parameters(
        self, spec: Spec, checked: dict[str, CheckedCell], threads: dict[str, int], dry_run: bool
    ) -> dict[str, dict[str, Any]]:
        multi_node = [name for name, c in checked.items() if c.shape.nodes > 1]
        if multi_node and not dry_run:  # its lines may still go to a scheduler by hand
            raise SpecError(
                f"cell(s) {multi_node} set trainer.num_nodes > 1: --launcher {self.name} runs every "
                "process of a run on this machine; use --launcher slurm"
            )
        return {}
