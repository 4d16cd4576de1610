"""`python cli.py sweep SPEC.yaml [--out DIR] [--jobs N|auto] [--threads T] [--launcher pool|local|slurm] [--no-warm]
[--dry-run] [--retry-failed] [--rerun CELL...]`

Expands a spec (see `experiments.sweep.spec`) into ordinary `cli.py fit` runs, checks all of them with
the suite's parser before the first starts, runs them (resuming interrupted ones from their last
checkpoint, skipping finished ones and ones another live process has claimed), keeps
`DIR/results.csv`, and ends with the report. `--launcher` says what runs them (`experiments.sweep.launchers`).

A dirty git tree is named at start and its patch kept with every run (`experiments.sweep.provenance`);
a spec with `require_clean: true` refuses it.

Exit status: the number of failed runs (0 when every run is done or diverged, or left to another
process; capped at 125); 2 for a spec that cannot run (or a dirty tree it refuses); 130 when interrupted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from contract.files import write_json_atomic
from contract.git import git_state
from contract.run_folder import FAILED, FINISHED
from experiments.analysis.report import SWEEP_INFO, build_report
from experiments.sweep.claims import describe, read_claim
from experiments.sweep.commands import Run, available_cores, make_runs
from experiments.sweep.launchers import LAUNCHERS, run_local, slurm_parameters, slurm_threads, submit_slurm
from experiments.sweep.ledger import LEDGER_NAME, Ledger
from experiments.sweep.processes import terminate_as_interrupt
from experiments.sweep.resources import auto_jobs, threads_per_process
from experiments.sweep.runner import plan, run_sweep
from experiments.sweep.spec import ROOT, SUMMARY_DIR, Spec, SpecError, load_spec
from experiments.sweep.validate import CheckedCell, check_spec


def check_same_sweep(out_dir: Path, spec: Spec) -> None:
    """Refuses to mix two different sweeps in one folder: a resumed sweep must be the same sweep
    (more seeds or cells are fine; changed settings of existing runs are not)."""
    path = out_dir / SWEEP_INFO
    if not path.exists():
        return
    old, new = json.loads(path.read_text()), spec.snapshot()
    changed = [key for key in ("base", "fixed", "checkpoint_every") if old.get(key) != new[key]]
    old_cells = {c["name"]: c["overrides"] for c in old.get("cells", [])}
    changed += [f"cell {c['name']}" for c in new["cells"] if old_cells.get(c["name"], c["overrides"]) != c["overrides"]]
    if changed:
        raise SpecError(
            f"{out_dir} holds a sweep with different {', '.join(changed)} (see {path}); "
            "use another --out, or delete the folder to start over"
        )


def check_tree(spec: Spec, out_dir: Path, dry_run: bool) -> None:
    """Says at start which uncommitted changes the runs will carry (each run keeps their patch in its
    `git.diff`; the ledger's `git_commit` ends in `-dirty`), and refuses them when the spec sets
    `require_clean: true` (a dry run runs nothing: it only says so).

    Raises:
        SpecError: `require_clean` and a dirty tree, or no git repository to check.
    """
    state = git_state(ROOT, [out_dir])
    if state is None:
        if spec.require_clean and not dry_run:
            raise SpecError(f"{spec.path} sets require_clean: true, but {ROOT} has no git commit to check (or no git)")
        print(f"warning: {ROOT} is not a git repository with a commit: the runs record no commit", file=sys.stderr)
        return
    if not state.dirty:
        return
    files = (
        f"has {len(state.changes)} uncommitted change(s) (git status --porcelain; changes in results folders "
        f"and in the sweep's folder are outputs, not counted):\n{state.describe()}"
    )
    if spec.require_clean and not dry_run:
        raise SpecError(
            f"{spec.path} sets require_clean: true, but the git tree at {ROOT} {files}\n"
            "Commit them (git add ... && git commit), then run the sweep again: its runs will record a clean commit."
        )
    refused = "\na real run of this spec refuses to start (require_clean: true)" if spec.require_clean else ""
    print(
        f"warning: the git tree at {ROOT} {files}\nthe runs will carry them: each run's folder keeps the patch "
        f"(git.diff), results.csv records git_commit {state.label}; commit them for runs that the "
        f"commit alone reproduces (a spec's require_clean: true enforces it){refused}",
        file=sys.stderr,
    )


def supersede(out_dir: Path, ledger: Ledger, runs: list[Run], cells: list[str]) -> Path | None:
    """Makes `cells` run again from scratch (after a fix in the code they use) without losing their
    old results: their run folders and ledger rows move to `DIR/superseded/<time>/`, where a
    before/after comparison can read them (`cli.py report` works on that folder too)."""
    names = list(dict.fromkeys(run.cell for run in runs))
    unknown = [cell for cell in cells if cell not in names]
    if unknown:
        raise SpecError(f"--rerun: no cell named {', '.join(unknown)}; the cells are: {', '.join(names)}")
    old = [run for run in runs if run.cell in cells and (run.dir.exists() or ledger.get(run.cell, run.seed))]
    running = [f"{run.name} ({describe(holder)})" for run in old if (holder := read_claim(run.dir))]
    if running:
        raise SpecError(f"--rerun: runs of these cells are running: {'; '.join(running)}; wait for them to end")
    if not old:
        return None
    dest = out_dir / "superseded" / time.strftime("%Y%m%d-%H%M%S")
    kept = Ledger(dest / LEDGER_NAME, ledger.axes)
    for run in old:
        if run.dir.exists():
            (dest / run.cell).mkdir(parents=True, exist_ok=True)
            shutil.move(run.dir, dest / run.cell / run.dir.name)
        row = ledger.rows.pop((run.cell, run.seed), None)
        if row:
            kept.rows[(run.cell, run.seed)] = row
    if kept.rows:
        kept.write()
        shutil.copy(out_dir / SWEEP_INFO, dest / SWEEP_INFO)
    ledger.write()
    return dest


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
    if args.launcher == "slurm":  # the scheduler places the jobs: nothing to share here
        return 1
    cores = available_cores()
    processes = max(c.shape.processes() for c in checked.values())
    todo = sum(
        run.cell in args.rerun or plan(run, ledger, args.retry_failed) in ("start", "resume")
        for run in make_runs(spec, checked, out_dir, {name: 1 for name in checked})
    )
    jobs = auto_jobs(cores, processes, todo)
    threads = args.threads or threads_per_process(cores, jobs, processes)
    print(
        f"--jobs auto: {jobs} run(s) at a time × {processes} process(es) × {threads} thread(s) "
        f"on {cores} cores ({todo} run(s) to do)",
        file=sys.stderr,
    )
    return jobs


def run_threads(args: argparse.Namespace, spec: Spec, checked: dict[str, CheckedCell]) -> dict[str, int]:
    """Threads of each process of a cell's runs: `--threads`; else, on this machine, the cores shared by
    `--jobs` runs of that cell's processes each; on SLURM, `launcher.cpus_per_task` (else 1)."""
    if args.launcher == "slurm":
        return {name: slurm_threads(spec.launcher, args.threads) for name in checked}
    cores = available_cores()
    return {
        name: args.threads or threads_per_process(cores, args.jobs, c.shape.processes()) for name, c in checked.items()
    }


def check_launcher(
    args: argparse.Namespace, spec: Spec, checked: dict[str, CheckedCell], threads: dict[str, int]
) -> dict[str, dict[str, Any]]:
    """Each cell's SLURM job parameters (`--launcher slurm`), or a check that its runs fit on this machine.

    Raises:
        SpecError: a multi-node run outside SLURM, or a `launcher:` block that does not fit the runs.
    """
    if args.launcher != "slurm":
        multi_node = [name for name, c in checked.items() if c.shape.nodes > 1]
        if multi_node and not args.dry_run:  # its lines may still go to a scheduler by hand
            raise SpecError(
                f"cell(s) {multi_node} set trainer.num_nodes > 1: --launcher {args.launcher} runs every "
                "process of a run on this machine; use --launcher slurm"
            )
        return {}
    parameters = {}
    for name, c in checked.items():
        try:
            parameters[name] = slurm_parameters(spec.launcher, c.shape, threads[name], f"sweep-{spec.path.stem}")
        except SpecError as err:
            raise SpecError(f"cell {name!r}: {err}") from None
    return parameters


def dry_run(args: argparse.Namespace, runs: list[Run], ledger: Ledger, parameters: dict[str, dict]) -> None:
    """Prints one shell line per run still to do (and, for SLURM, each cell's job parameters)."""
    actions = [(run, "start" if run.cell in args.rerun else plan(run, ledger, args.retry_failed)) for run in runs]
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
        help="pool: this process runs them; local: submitit jobs on this machine (waits); "
        "slurm: a SLURM job array (submits and returns; run again to record)",
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
        check_same_sweep(out_dir, spec)
        check_tree(spec, out_dir, args.dry_run)
        ledger = Ledger(out_dir / LEDGER_NAME, spec.axes)
        if args.jobs == "auto":
            args.jobs = choose_jobs(args, spec, checked, ledger, out_dir)
        threads = run_threads(args, spec, checked)
        parameters = check_launcher(args, spec, checked, threads)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    runs = make_runs(spec, checked, out_dir, threads)

    if args.dry_run:
        dry_run(args, runs, ledger, parameters)
        return 0

    if args.rerun:
        try:
            moved = supersede(out_dir, ledger, runs, args.rerun)
        except SpecError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        if moved:
            print(f"moved the old runs of {', '.join(args.rerun)} to {_shown(moved)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / SWEEP_INFO, spec.snapshot())
    axis_values = {name: c.axis_values for name, c in checked.items()}
    submitted = 0
    try:
        with terminate_as_interrupt():
            if args.launcher == "pool":
                claimed = run_sweep(runs, ledger, axis_values, args.jobs, args.retry_failed, warm=not args.no_warm)
            elif args.launcher == "local":
                claimed = run_local(runs, ledger, axis_values, args.jobs, args.retry_failed, spec.launcher, out_dir)
            else:
                try:
                    claimed, submitted = submit_slurm(runs, ledger, axis_values, parameters, args.retry_failed, out_dir)
                except RuntimeError as err:  # submitit: no `srun` here (not a SLURM machine), or sbatch refused
                    print(f"error: --launcher slurm: {err}", file=sys.stderr)
                    return 2
    except KeyboardInterrupt:
        return 130

    ledger.reload()  # other sweeps sharing the folder may have recorded runs meanwhile
    rows = [ledger.get(run.cell, run.seed) for run in runs]
    failed = sum(1 for row in rows if row and row["status"] == FAILED)
    if args.launcher != "slurm" or any(row and row["status"] in FINISHED for row in rows):
        print(f"\n{build_report(out_dir)}\n")
        print(f"Ledger:      {_shown(out_dir / LEDGER_NAME)}")
        print(f"Report:      {_shown(out_dir / 'report.md')}")
        print(f"TensorBoard: tensorboard --logdir {_shown(out_dir / SUMMARY_DIR)}")
    if claimed:
        print(f"{len(claimed)} run(s) skipped: another live process has claimed them (the report covers what ended):")
        for run, why in claimed:
            print(f"  {run.name}: {why}")
        print("Run the same command again when they have ended to record them.")
    if submitted or args.launcher == "slurm":
        missing = sum(row is None for row in rows)
        print(f"{len(runs) - missing} of {len(runs)} runs recorded; {submitted} submitted now.")
    if failed:
        print(f"{failed} run(s) failed (see their run.log); rerun with --retry-failed to try them again.")
    return min(failed, 125)
