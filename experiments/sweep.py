"""`python cli.py sweep SPEC.yaml [--out DIR] [--jobs N] [--threads T] [--dry-run] [--retry-failed] [--rerun CELL...]`

Expands a spec (see `experiments.spec`) into ordinary `cli.py fit` runs, checks all of them with
the suite's parser before the first starts, runs them (resuming interrupted ones from their last
checkpoint, skipping finished ones), keeps `DIR/results.csv`, and ends with the report.

Exit status: the number of failed runs (0 when every run is done or diverged; capped at 125);
2 for a spec that cannot run; 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from experiments.commands import Run, available_cores, make_runs
from experiments.ledger import LEDGER_NAME, Ledger
from experiments.report import SWEEP_INFO, build_report
from experiments.runner import plan, run_sweep
from experiments.spec import Spec, SpecError, load_spec
from experiments.validate import check_spec


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


def supersede(out_dir: Path, ledger: Ledger, runs: list[Run], cells: list[str]) -> Path | None:
    """Makes `cells` run again from scratch (after a fix in the code they use) without losing their
    old results: their run folders and ledger rows move to `DIR/superseded/<time>/`, where a
    before/after comparison can read them (`cli.py report` works on that folder too)."""
    names = list(dict.fromkeys(run.cell for run in runs))
    unknown = [cell for cell in cells if cell not in names]
    if unknown:
        raise SpecError(f"--rerun: no cell named {', '.join(unknown)}; the cells are: {', '.join(names)}")
    old = [run for run in runs if run.cell in cells and (run.dir.exists() or ledger.get(run.cell, run.seed))]
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


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (`kill`, a scheduler's preemption) stops the runs in progress like Ctrl-C, instead of
    leaving them running without the sweep."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time; each gets cores // jobs threads")
    parser.add_argument("--threads", type=int, help="torch threads per run instead of cores // jobs")
    parser.add_argument("--dry-run", action="store_true", help="print each run's shell command; run nothing")
    parser.add_argument("--retry-failed", action="store_true", help="run again the runs recorded as failed")
    parser.add_argument(
        "--rerun", nargs="+", default=[], metavar="CELL",
        help="run these cells again from scratch (e.g. after a fix); old runs move to DIR/superseded/",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1 or (args.threads is not None and args.threads < 1):
        parser.error("--jobs and --threads must be at least 1")

    try:
        spec = load_spec(args.spec)
        checked = check_spec(spec)
        out_dir = (args.out or Path("runs") / spec.path.stem).resolve()
        check_same_sweep(out_dir, spec)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    runs = make_runs(spec, checked, out_dir, args.threads or max(1, available_cores() // args.jobs))
    ledger = Ledger(out_dir / LEDGER_NAME, spec.axes)

    if args.dry_run:
        actions = [(run, "start" if run.cell in args.rerun else plan(run, ledger, args.retry_failed)) for run in runs]
        for run, action in actions:
            if action in ("start", "resume"):
                print(run.shell(resume=action == "resume"))
        to_run = sum(a in ("start", "resume") for _, a in actions)
        print(f"# {to_run} of {len(runs)} runs to run ({len(runs) - to_run} finished or recorded)", file=sys.stderr)
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
    info = out_dir / SWEEP_INFO
    info.with_suffix(".tmp").write_text(json.dumps(spec.snapshot(), indent=2))
    os.replace(info.with_suffix(".tmp"), info)
    try:
        with _terminate_as_interrupt():
            run_sweep(runs, ledger, {name: c.axis_values for name, c in checked.items()}, args.jobs, args.retry_failed)
    except KeyboardInterrupt:
        return 130

    table = build_report(out_dir)
    rows = [ledger.get(run.cell, run.seed) for run in runs]
    failed = sum(1 for row in rows if row and row["status"] == "failed")
    print(f"\n{table}\n")
    print(f"Ledger:      {_shown(out_dir / LEDGER_NAME)}")
    print(f"Report:      {_shown(out_dir / 'report.md')}")
    print(f"TensorBoard: tensorboard --logdir {_shown(out_dir)}")
    if failed:
        print(f"{failed} run(s) failed (see their run.log); rerun with --retry-failed to try them again.")
    return min(failed, 125)
