"""`python cli.py sweep SPEC.yaml [--out DIR] [--jobs N|auto] [--threads T] [--launcher pool|local|slurm] [--no-warm]
[--dry-run] [--retry-failed] [--rerun CELL...]`

Expands a spec (see `experiments.sweep.spec`) into ordinary `cli.py fit` runs, checks all of them with
the suite's parser before the first starts, runs them (resuming interrupted ones from their last
checkpoint, skipping finished ones and ones another live process has claimed), keeps
`DIR/results.csv`, and ends with the report. `--launcher` says what runs them (`experiments.sweep.launchers`);
the report is the analysis's (`experiments.analysis.report`): this tool, above both, composes them.

A dirty git tree is named at start and its patch kept with every run (`experiments.sweep.provenance`);
a spec with `require_clean: true` refuses it.

Exit status: the number of failed runs (0 when every run is done or diverged, or left to another
process; capped at 125); 2 for a spec that cannot run (or a dirty tree it refuses); 130 when interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from contract.files import write_json_atomic
from contract.run_folder import FAILED, FINISHED
from experiments.analysis.report import build_report
from experiments.records.layout import LEDGER_NAME, REPORT_NAME, SUMMARY_DIR, SWEEP_INFO
from experiments.records.ledger import Ledger
from experiments.records.values import format_value
from experiments.sweep.claims import describe, read_claim
from experiments.sweep.expand import sweep_runs
from experiments.sweep.launchers import LAUNCHERS, Launch
from experiments.sweep.processes import terminate_as_interrupt
from experiments.sweep.provenance import check_tree
from experiments.sweep.resources import auto_jobs, threads_per_process
from experiments.sweep.runner import plan
from experiments.sweep.runs import Run, available_cores
from experiments.sweep.same_sweep import check_same_sweep, sweep_info
from experiments.sweep.spec import Spec, SpecError, load_spec
from experiments.sweep.supersede import supersede
from experiments.sweep.tuning import extension_rule, initial_points
from experiments.sweep.validate import CheckedCell, check_spec


def jobs_value(text: str) -> int | str:
    """`--jobs`: a count of at least 1, or `auto`."""
    if text == "auto":
        return text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r}: give a number of runs at a time (1, 2, ...) or auto")


def choose_jobs(
    args: argparse.Namespace, spec: Spec, checked: dict[str, CheckedCell], ledger: Ledger, out_dir: Path
) -> int:
    """`--jobs auto` on this machine (`resources.auto_jobs`), printed with the threads it implies."""
    if not LAUNCHERS[args.launcher].on_this_machine:  # a scheduler places the jobs: nothing to share here
        return 1
    cores = available_cores()
    processes = max(c.shape.processes() for c in checked.values())
    todo = sum(
        run.base_cell in args.rerun or plan(run, ledger, args.retry_failed) in ("start", "resume")
        for run in sweep_runs(spec, checked, out_dir, {name: 1 for name in checked}, ledger)
    )
    jobs = auto_jobs(cores, processes, todo)
    threads = args.threads or threads_per_process(cores, jobs, processes)
    print(
        f"--jobs auto: {jobs} run(s) at a time × {processes} process(es) × {threads} thread(s) "
        f"on {cores} cores ({todo} run(s) to do)",
        file=sys.stderr,
    )
    return jobs


def dry_run(args: argparse.Namespace, runs: list[Run], ledger: Ledger, parameters: dict[str, dict]) -> None:
    """Prints one shell line per run still to do (and, for SLURM, each cell's job parameters)."""
    actions = [(run, "start" if run.base_cell in args.rerun else plan(run, ledger, args.retry_failed)) for run in runs]
    shown = None
    for run, action in actions:
        if action not in ("start", "resume"):
            continue
        if run.cell in parameters and parameters[run.cell] != shown:
            shown = parameters[run.cell]
            print(f"# SLURM job of each run below (submitit parameters): {json.dumps(shown, sort_keys=True)}")
        holder = read_claim(run.dir)
        print(run.shell(resume=action == "resume") + (f"  # {describe(holder)}" if holder else ""))
    to_run = sum(a in ("start", "resume") for _, a in actions)
    print(f"# {to_run} of {len(runs)} runs to run ({len(runs) - to_run} finished or recorded)", file=sys.stderr)


def _shown(path: Path) -> str:
    """A path relative to the working directory when it is below it (shorter commands to copy)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def main(argv: list[str]) -> int:
    """Runs the sweep command. Returns the exit status (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="cli.py sweep", description="Run a sweep spec: many `cli.py fit` runs.")
    parser.add_argument("spec", type=Path, help="the sweep spec (YAML), e.g. experiments/demo.yaml")
    parser.add_argument("--out", type=Path, help="sweep folder (default: runs/<spec name>)")
    parser.add_argument(
        "--jobs", type=jobs_value, default=1,
        help="runs at a time (not processes): each process of a run gets cores // (jobs × processes per run) "
        "threads; auto: one single-thread process per core, at most one run per run left to do",
    )
    parser.add_argument("--threads", type=int, help="torch threads per process instead of the share above")
    parser.add_argument(
        "--launcher", choices=LAUNCHERS, default="pool",
        help="; ".join(f"{name}: {launcher.help}" for name, launcher in LAUNCHERS.items()),
    )
    parser.add_argument(
        "--no-warm", action="store_true",
        help="start each run as a fresh interpreter (pool launcher; by default each is forked from a warm "
        "process that has imported torch, Lightning and the suite once: the same results, without seconds "
        "of imports per run)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print each run's shell command; run nothing")
    parser.add_argument("--retry-failed", action="store_true", help="run again the runs recorded as failed")
    parser.add_argument(
        "--rerun", nargs="+", default=[], metavar="CELL",
        help="run these cells again from scratch (e.g. after a fix); old runs move to DIR/superseded/",
    )
    args = parser.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")

    try:
        spec = load_spec(args.spec)
        checked = check_spec(spec)
        out_dir = (args.out or Path("runs") / spec.path.stem).resolve()
        check_same_sweep(out_dir, spec, checked)
        check_tree(spec, out_dir, args.dry_run)
        ledger = Ledger(out_dir / LEDGER_NAME, spec.ledger_axes)
        if args.jobs == "auto":
            args.jobs = choose_jobs(args, spec, checked, ledger, out_dir)
        launcher = LAUNCHERS[args.launcher]
        threads = launcher.threads(spec, checked, args.threads, args.jobs)
        parameters = launcher.job_parameters(spec, checked, threads, args.dry_run)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    runs = sweep_runs(spec, checked, out_dir, threads, ledger)

    if args.dry_run:
        dry_run(args, runs, ledger, parameters)
        if spec.tune:
            points = ", ".join(format_value(list(p)) for p in initial_points(spec.tune))
            print(f"# tune: initial grid of {list(spec.tune.names)}: {points}", file=sys.stderr)
            print(f"# tune: {extension_rule(spec.tune)}", file=sys.stderr)
        return 0

    if args.rerun:
        try:
            moved = supersede(out_dir, ledger, runs, args.rerun)
        except SpecError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        if moved:
            print(f"moved the old runs of {', '.join(args.rerun)} to {_shown(moved)}")
        runs = sweep_runs(spec, checked, out_dir, threads, ledger)  # a tuned cell searches again
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / SWEEP_INFO, sweep_info(spec, checked))
    axis_values = {name: c.axis_values for name, c in checked.items()}
    try:
        with terminate_as_interrupt():
            while True:  # a tuned sweep: rounds, until the ledger calls for no run not yet launched
                launch = Launch(runs, ledger, axis_values, args.jobs, args.retry_failed, out_dir, spec.launcher,
                                parameters, warm=not args.no_warm)  # fmt: skip
                launched = launcher.launch(launch)
                if spec.tune is None or not launcher.waits:
                    break
                ledger.reload()
                known, runs = {run.name for run in runs}, sweep_runs(spec, checked, out_dir, threads, ledger)
                if {run.name for run in runs} <= known:
                    break
    except KeyboardInterrupt:
        return 130
    except SpecError as err:  # the scheduler refused (no SLURM here, sbatch failed)
        print(f"error: {err}", file=sys.stderr)
        return 2

    ledger.reload()  # other sweeps sharing the folder may have recorded runs meanwhile
    rows = [ledger.get(run.cell, run.seed) for run in runs]
    failed = sum(1 for row in rows if row and row["status"] == FAILED)
    if launcher.waits or any(row and row["status"] in FINISHED for row in rows):
        print(f"\n{build_report(out_dir)}\n")
        print(f"Ledger:      {_shown(out_dir / LEDGER_NAME)}")
        print(f"Report:      {_shown(out_dir / REPORT_NAME)}")
        print(f"TensorBoard: tensorboard --logdir {_shown(out_dir / SUMMARY_DIR)}")
    if launched.claimed:
        print(
            f"{len(launched.claimed)} run(s) skipped: another live process has claimed them "
            "(the report covers what ended):"
        )
        for run, why in launched.claimed:
            print(f"  {run.name}: {why}")
        print("Run the same command again when they have ended to record them.")
    if not launcher.waits:
        missing = sum(row is None for row in rows)
        print(f"{len(runs) - missing} of {len(runs)} runs recorded; {launched.submitted} submitted now.")
    if failed:
        print(f"{failed} run(s) failed (see their run.log); rerun with --retry-failed to try them again.")
    return min(failed, 125)
