"""The sweep engine as one call: `run_sweep(spec, out, launcher=..., jobs=...)` checks the spec, the folder and
the git tree, runs what the sweep still needs (a tuned sweep round after round, until its ledger calls for no
run not yet launched) and returns what happened (`SweepOutcome`). `plan_sweep` stops before running: its
`SweepPlan` lists the runs and their shell lines (`--dry-run`).

The engine does not report: the analysis reads the ledger it leaves (`experiments.analysis.sweep_report`), and the
tool above both (`tools/sweep.py`) composes them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from contract.files import write_json_atomic
from contract.run_folder import FAILED, FINISHED
from experiments.records.layout import LEDGER_NAME, SWEEP_INFO
from experiments.records.ledger import PHASE_COLUMN, Ledger
from experiments.records.values import format_value
from experiments.sweep.branches import HorizonPlan, horizon_runs
from experiments.sweep.claims import describe, read_claim
from experiments.sweep.expand import sweep_runs
from experiments.sweep.launchers import LAUNCHERS, Launch, Launched, Launcher
from experiments.sweep.processes import terminate_as_interrupt
from experiments.sweep.provenance import check_tree
from experiments.sweep.resources import auto_jobs, threads_per_process
from experiments.sweep.runner import plan
from experiments.sweep.runs import Run, available_cores
from experiments.sweep.same_sweep import check_same_sweep, sweep_info
from experiments.sweep.spec import Spec, SpecError, load_spec
from experiments.sweep.supersede import supersede
from experiments.sweep.tuned_branches import tuned_horizon_runs
from experiments.sweep.tuning import extension_rule, initial_points
from experiments.sweep.validate import CheckedCell, check_spec

UNRECORDED = "unrecorded"  # not a ledger status: a run without a row (submitted, claimed elsewhere, interrupted)


@dataclass(frozen=True)
class SweepOutcome:
    """What a `run_sweep` call did.

    Args:
        spec: the sweep.
        out_dir: its folder.
        ledger: its ledger (`results.csv`), which the report reads.
        runs: the names (`<cell>/seed<k>`) of the sweep's runs by ledger status (done, diverged, failed), and
            those without a row yet under `UNRECORDED`.
        phases: a tuned sweep's run names by phase (search, final; a ladder tuned once: verify; with `horizons:`,
            stable and branch); {} for a plain sweep.
        rounds: launches made: 1, or one per round of a tuned sweep's searches.
        claimed: runs left to another live process, each with its claim's description.
        submitted: runs handed to a scheduler that runs them after this call returned.
        waited: the launcher waited for its runs to end (else it submitted them and returned).
        superseded: where `rerun` moved the old runs of its cells; None when it moved none.
    """

    spec: Spec
    out_dir: Path
    ledger: Path
    runs: dict[str, tuple[str, ...]]
    phases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    rounds: int = 1
    claimed: tuple[tuple[str, str], ...] = ()
    submitted: int = 0
    waited: bool = True
    superseded: Path | None = None

    @property
    def total(self) -> int:
        return sum(len(names) for names in self.runs.values())

    @property
    def recorded(self) -> int:
        return self.total - len(self.runs.get(UNRECORDED, ()))

    @property
    def failed(self) -> int:
        return len(self.runs.get(FAILED, ()))

    @property
    def finished(self) -> int:
        return sum(len(self.runs.get(status, ())) for status in FINISHED)


@dataclass
class SweepPlan:
    """A checked sweep, ready to run: its cells parsed, its folder and tree checked, its resources chosen."""

    spec: Spec
    checked: dict[str, CheckedCell]
    out_dir: Path
    ledger: Ledger
    launcher: Launcher
    jobs: int
    threads: dict[str, int]  # torch threads of each process of a cell's runs
    parameters: dict[str, dict]  # each cell's scheduler job parameters (`Launcher.job_parameters`)
    retry_failed: bool = False
    rerun: tuple[str, ...] = ()
    blocked: list[dict[str, str]] = field(default_factory=list)  # `horizons:` branches that cannot run (their rows)

    def runs(self) -> list[Run]:
        """The runs the sweep needs now (a tuned sweep, or one with `horizons:`: those its ledger calls for)."""
        return needed_runs(self.spec, self.checked, self.out_dir, self.threads, self.ledger)

    def _needed(self) -> list[Run]:
        """`runs()`; with `horizons:`, also records why the branches of failed or diverged stable runs cannot run
        (and drops those rows once they can: `experiments.sweep.branches`)."""
        if self.spec.horizons is None:
            return self.runs()
        plan = branched_runs(self.spec, self.checked, self.out_dir, self.threads, self.ledger)
        plan.apply(self.ledger)
        self.blocked = plan.blocked
        return plan.runs

    def action(self, run: Run) -> str:
        return "start" if run.base_cell in self.rerun else plan(run, self.ledger, self.retry_failed)

    def dry_run(self) -> tuple[list[str], list[str]]:
        """One shell line per run still to do (for SLURM, each cell's job parameters as a comment line before
        its runs), and notes: how many runs are left; a tuned sweep's initial grid and its extension rule."""
        runs, lines, shown = self.runs(), [], None
        actions = [(run, self.action(run)) for run in runs]
        for run, action in actions:
            if action not in ("start", "resume"):
                continue
            if run.base_cell in self.parameters and self.parameters[run.base_cell] != shown:
                shown = self.parameters[run.base_cell]
                job = json.dumps(shown, sort_keys=True)
                lines.append(f"# SLURM job of each run below (submitit parameters): {job}")
            holder = read_claim(run.dir)
            lines.append(run.shell(resume=action == "resume") + (f"  # {describe(holder)}" if holder else ""))
        to_run = sum(a in ("start", "resume") for _, a in actions)
        notes = [f"# {to_run} of {len(runs)} runs to run ({len(runs) - to_run} finished or recorded)"]
        if tune := self.spec.tune:
            points = ", ".join(format_value(list(p)) for p in initial_points(tune))
            notes += [f"# tune: initial grid of {list(tune.names)}: {points}", f"# tune: {extension_rule(tune)}"]
        if self.spec.horizons:
            notes += [f"# horizons: {self.spec.horizons.describe()} (the branches are listed once their stable run "
                      "is done)"]  # fmt: skip
        return lines, notes

    def run(self, warm: bool = True) -> SweepOutcome:
        """Runs the sweep to the end its launcher reaches (see the module docstring)."""
        runs = self._needed()
        moved = supersede(self.out_dir, self.ledger, runs, list(self.rerun)) if self.rerun else None
        if self.rerun:
            runs = self._needed()  # a tuned cell searches again
        self.out_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.out_dir / SWEEP_INFO, sweep_info(self.spec, self.checked))
        axis_values = {name: c.axis_values for name, c in self.checked.items()}
        rounds = 0
        with terminate_as_interrupt():
            while True:  # a tuned sweep, or horizons: rounds, until the ledger calls for no run not yet launched
                launch = Launch(runs, self.ledger, axis_values, self.jobs, self.retry_failed, self.out_dir,
                                self.spec.launcher, self.parameters, warm=warm)  # fmt: skip
                launched, rounds = self.launcher.launch(launch), rounds + 1
                if (self.spec.tune is None and self.spec.horizons is None) or not self.launcher.waits:
                    break
                self.ledger.reload()
                known, runs = {run.name for run in runs}, self._needed()
                if {run.name for run in runs} <= known:
                    break
        self.ledger.reload()  # other sweeps sharing the folder may have recorded runs meanwhile
        return self._outcome(runs, launched, rounds, moved)

    def _outcome(self, runs: list[Run], launched: Launched, rounds: int, moved: Path | None) -> SweepOutcome:
        by_status: dict[str, tuple[str, ...]] = {}
        phases: dict[str, tuple[str, ...]] = {}
        for run in runs:
            row = self.ledger.get(run.cell, run.seed)
            status = row["status"] if row else UNRECORDED
            by_status[status] = (*by_status.get(status, ()), run.name)
            phase = dict(run.columns).get(PHASE_COLUMN)
            if phase:
                phases[phase] = (*phases.get(phase, ()), run.name)
        for row in self.blocked:  # `horizons:` branches recorded without running
            name = f"{row['cell']}/seed{row['seed']}"
            by_status[row["status"]] = (*by_status.get(row["status"], ()), name)
            phases[row[PHASE_COLUMN]] = (*phases.get(row[PHASE_COLUMN], ()), name)
        claimed = tuple((run.name, why) for run, why in launched.claimed)
        return SweepOutcome(self.spec, self.out_dir, self.ledger.path, by_status, phases, rounds, claimed,
                            launched.submitted, self.launcher.waits, moved)  # fmt: skip


def needed_runs(
    spec: Spec, checked: dict[str, CheckedCell], out_dir: Path, threads: dict[str, int], ledger: Ledger
) -> list[Run]:
    """The runs the sweep needs now given its ledger (`expand.sweep_runs`; `branched_runs` for horizons)."""
    if spec.horizons is not None:
        return branched_runs(spec, checked, out_dir, threads, ledger).runs
    return sweep_runs(spec, checked, out_dir, threads, ledger)


def branched_runs(
    spec: Spec, checked: dict[str, CheckedCell], out_dir: Path, threads: dict[str, int], ledger: Ledger
) -> HorizonPlan:
    """A `horizons:` sweep's stable runs and branches given its ledger (tuned: at each horizon's own point)."""
    horizon_plan = tuned_horizon_runs if spec.tune is not None else horizon_runs
    return horizon_plan(spec, checked, out_dir, threads, ledger)


def plan_sweep(
    spec: Spec | str | Path,
    out: str | Path | None = None,
    *,
    launcher: str = "pool",
    jobs: int | Literal["auto"] = 1,
    threads: int | None = None,
    retry_failed: bool = False,
    rerun: Sequence[str] = (),
    dry_run: bool = False,
) -> SweepPlan:
    """Checks a sweep before any run: every cell with the suite's parser, that the folder holds this sweep (or
    none), the git tree (`require_clean`), and the launcher's resources; see `run_sweep` for the arguments.

    Raises:
        SpecError: the sweep cannot run (a bad spec, another sweep in the folder, a dirty tree it refuses).
    """
    if launcher not in LAUNCHERS:
        raise SpecError(f"launcher {launcher!r}: choose one of {list(LAUNCHERS)}")
    spec = spec if isinstance(spec, Spec) else load_spec(spec)
    if rerun and spec.horizons:
        raise SpecError("--rerun: not for a sweep with horizons: yet (a cell's branches start from its stable run); "
                        "move the cell's folders and rows aside by hand, or use another --out")  # fmt: skip
    checked = check_spec(spec)
    out_dir = Path(out or Path("runs") / spec.path.stem).resolve()
    check_same_sweep(out_dir, spec, checked)
    check_tree(spec, out_dir, dry_run)
    ledger, chosen = Ledger(out_dir / LEDGER_NAME, spec.ledger_axes), LAUNCHERS[launcher]
    sweep = SweepPlan(spec, checked, out_dir, ledger, chosen, 1, {}, {}, retry_failed, tuple(rerun))
    sweep.jobs = _auto_jobs(sweep, threads) if jobs == "auto" else jobs
    sweep.threads = chosen.threads(spec, checked, threads, sweep.jobs)
    sweep.parameters = chosen.job_parameters(spec, checked, sweep.threads, dry_run)
    return sweep


def _auto_jobs(sweep: SweepPlan, threads: int | None) -> int:
    """`jobs="auto"` on this machine (`resources.auto_jobs`), said on stderr with the threads it implies."""
    if not sweep.launcher.on_this_machine:  # a scheduler places the jobs: nothing to share here
        return 1
    cores = available_cores()
    processes = max(c.shape.processes() for c in sweep.checked.values())
    runs = needed_runs(sweep.spec, sweep.checked, sweep.out_dir, {name: 1 for name in sweep.checked}, sweep.ledger)
    todo = sum(sweep.action(run) in ("start", "resume") for run in runs)  # (threads do not change which runs)
    jobs = auto_jobs(cores, processes, todo)
    print(
        f"--jobs auto: {jobs} run(s) at a time × {processes} process(es) × "
        f"{threads or threads_per_process(cores, jobs, processes)} thread(s) on {cores} cores ({todo} run(s) to do)",
        file=sys.stderr,
    )
    return jobs


def run_sweep(
    spec: Spec | str | Path,
    out: str | Path | None = None,
    *,
    launcher: str = "pool",
    jobs: int | Literal["auto"] = 1,
    threads: int | None = None,
    warm: bool = True,
    retry_failed: bool = False,
    rerun: Sequence[str] = (),
) -> SweepOutcome:
    """Runs a sweep: every run its spec needs that its folder has not recorded, resumed where a run was cut.

    Args:
        spec: the spec, or its YAML file.
        out: the sweep folder (default: `runs/<spec name>`).
        launcher: what runs the runs (`experiments.sweep.launchers`: pool, local, slurm).
        jobs: runs at a time, or "auto" (one single-thread process per core, at most one per run to do).
        threads: torch threads of each run's processes (default: the cores shared by `jobs` runs).
        warm: fork each run from a warm process (the pool launcher) instead of a fresh interpreter.
        retry_failed: run again the runs recorded as failed.
        rerun: cells to run again from scratch; their old runs move to `DIR/superseded/`.

    Raises:
        SpecError: the sweep cannot run (see `plan_sweep`), or a scheduler refused it.
        KeyboardInterrupt: interrupted (SIGINT or SIGTERM); the same call again resumes.
    """
    sweep = plan_sweep(spec, out, launcher=launcher, jobs=jobs, threads=threads, retry_failed=retry_failed,
                       rerun=rerun)  # fmt: skip
    return sweep.run(warm)
