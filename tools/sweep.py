"""`python cli.py sweep SPEC.yaml [--out DIR] [--jobs N|auto] [--threads T] [--launcher pool|local|slurm] [--no-warm]
[--dry-run] [--retry-failed] [--rerun CELL...]`

Runs a spec (see `experiments.sweep.spec`) with the engine (`experiments.sweep.run_sweep`: every run an ordinary
`cli.py fit`, checked before the first starts, resumed where cut, `DIR/results.csv` kept), then prints the
report (`experiments.analysis.sweep_report`): this tool, above both, composes them. A dirty git tree is named at
start and its patch kept with every run; a spec with `require_clean: true` refuses it.

Exit status: 0 when every run is done or diverged (or left to another process); 1 when a full disk stopped the
sweep (`experiments.sweep.launchers.pool`; `cli.py` says so in one line); 2 for a spec that cannot run (or a dirty
tree it refuses); 3 when runs failed (their count is the last line); 130 when interrupted. One status per cause, so
a script can tell a bad spec from failed runs (a count of failed runs would read 2 failures as a bad spec).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments.analysis.sweep_report import build_report
from experiments.records.layout import REPORT_NAME, SUMMARY_DIR
from experiments.sweep import SpecError, SweepOutcome, plan_sweep
from experiments.sweep.launchers import LAUNCHERS
from tools.report import tensorboard_command

RUNS_FAILED = 3  # the exit status when one or more runs failed


def jobs_value(text: str) -> int | str:
    """`--jobs`: a count of at least 1, or `auto`."""
    if text == "auto":
        return text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r}: give a number of runs at a time (1, 2, ...) or auto")


def _shown(path: Path) -> str:
    """A path relative to the working directory when it is below it (shorter commands to copy)."""
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cli.py sweep", description="Run a sweep spec: many `cli.py fit` runs.")
    p.add_argument("spec", type=Path, help="the sweep spec (YAML), e.g. experiments/demo.yaml")
    p.add_argument("--out", type=Path, help="sweep folder (default: runs/<spec name>)")
    p.add_argument("--jobs", type=jobs_value, default=1, help="runs at a time (not processes): each process of a run "
                   "gets cores // (jobs × processes per run) threads; auto: one single-thread process per core, at "
                   "most one run per run left to do")  # fmt: skip
    p.add_argument("--threads", type=int, help="torch threads per process instead of the share above (the sweep sets "
                   "each run's OMP_NUM_THREADS: one exported in this shell is not read)")  # fmt: skip
    p.add_argument("--launcher", choices=LAUNCHERS, default="pool",
                   help="; ".join(f"{name}: {launcher.help}" for name, launcher in LAUNCHERS.items()))  # fmt: skip
    p.add_argument("--no-warm", action="store_true", help="start each run as a fresh interpreter (pool launcher; by "
                   "default each is forked from a warm process that has imported torch, Lightning and the suite "
                   "once: the same results, without seconds of imports per run)")  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="print each run's shell command; run nothing")
    p.add_argument("--retry-failed", action="store_true", help="run again the runs recorded as failed")
    p.add_argument("--rerun", nargs="+", default=[], metavar="CELL", help="run these cells again from scratch "
                   "(e.g. after a fix); old runs move to DIR/superseded/")  # fmt: skip
    return p


def say(outcome: SweepOutcome, rerun: list[str]) -> None:
    """What the sweep did, after its report: moved runs, runs left to others, submissions, failures."""
    if outcome.superseded:
        print(f"moved the old runs of {', '.join(rerun)} to {_shown(outcome.superseded)}")
    if outcome.waited or outcome.finished:
        print(f"\n{build_report(outcome.out_dir)}\n")
        print(f"Ledger:      {_shown(outcome.ledger)}")
        print(f"Report:      {_shown(outcome.out_dir / REPORT_NAME)}")
        print(f"TensorBoard: {tensorboard_command(_shown(outcome.out_dir / SUMMARY_DIR))}")
    if outcome.claimed:
        print(f"{len(outcome.claimed)} run(s) skipped: another live process has claimed them (the report covers "
              "what ended):", *(f"  {name}: {why}" for name, why in outcome.claimed), sep="\n")  # fmt: skip
        print("Run the same command again when they have ended to record them.")
    if not outcome.waited:
        print(f"{outcome.recorded} of {outcome.total} runs recorded; {outcome.submitted} submitted now.")
    if outcome.failed:
        print(f"{outcome.failed} run(s) failed (see their run.log); rerun with --retry-failed to try them again.")


def main(argv: list[str]) -> int:
    """Runs the sweep command. Returns the exit status (see the module docstring)."""
    args = (p := parser()).parse_args(argv)
    if args.threads is not None and args.threads < 1:
        p.error("--threads must be at least 1")
    try:
        sweep = plan_sweep(args.spec, args.out, launcher=args.launcher, jobs=args.jobs, threads=args.threads,
                           retry_failed=args.retry_failed, rerun=args.rerun, dry_run=args.dry_run)  # fmt: skip
        if args.dry_run:
            lines, notes = sweep.dry_run()
            for line in lines:
                print(line)
            print(*notes, sep="\n", file=sys.stderr)
            return 0
        outcome = sweep.run(warm=not args.no_warm)
    except SpecError as err:  # before any run; or the scheduler refused (no SLURM here, sbatch failed)
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    say(outcome, args.rerun)
    return RUNS_FAILED if outcome.failed else 0
