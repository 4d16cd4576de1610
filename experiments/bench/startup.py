"""Per-run start-up cost of a sweep: the same 1-step run started as a fresh `python cli.py fit` (cold)
and forked from the sweep's warm process (warm: `experiments.sweep.warm`, the pool launcher's default).

Per-run overhead = the run's wall time as the sweep runs it (`runner.attempt`: process start to exit)
minus its training time (first to last TensorBoard event: the ledger's `wall_time_s`). It is
interpreter start and imports (cold only), parsing the config, building the data and model, and exit.
Each repetition runs the run cold and warm, the order alternating; the warm process is started before
the repetitions, and its first run, which waits for the warm process's imports, is shown apart. The
runs' CPU time (user + system) is shown too: a loaded machine stretches wall times far more.
"""

from __future__ import annotations

import os
import resource
import tempfile
import time
from pathlib import Path

import yaml

from .common import Context
from .tables import Section, Table, Target
from .timing import Timing, load_average

MAX_REPS = 5  # a cold run takes several seconds: --reps is capped here
MAX_RETRIES = 2  # warm runs measured again when a source change made the warm process import again
OVERHEAD_TARGET_S = 1.0
# the tests' tiny GPT (tests/experiments/conftest.py), one training step and one validation
SPEC = {
    "base": ["configs/gpt/base.yaml", "configs/gpt/tiny.yaml"],
    "fixed": {
        "model.arch.d_model": 32,
        "model.arch.n_layers": 1,
        "model.sample_tokens": 0,
        "data.seq_len": 16,
        "data.batch_size": 8,
        "data.val_tokens": 256,
        "trainer.max_steps": 1,
        "trainer.val_check_interval": 1,
        "trainer.num_sanity_val_steps": 0,
        "trainer.enable_model_summary": False,
    },
    "grid": {"model.arch.pos_encoding": ["rope"]},
    "checkpoint_every": 1000,
}


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_run(spec, checked, out: Path, procs) -> tuple[float, float, float]:
    """(wall time, training time, CPU time) in seconds of the spec's one run, started afresh in the sweep
    folder `out`. CPU time: user + system of the run's process (and the processes it waited for)."""
    from experiments.records.events import read_scalars
    from experiments.sweep.expand import make_runs
    from experiments.sweep.runner import attempt, prepare

    (run,) = make_runs(spec, checked, out, {name: 1 for name in checked})
    prepare(run, "start")
    start, cpu = time.perf_counter(), children_cpu_s()
    result = attempt(run, "start", echo=False, procs=procs)
    wall, cpu = time.perf_counter() - start, children_cpu_s() - cpu
    if result.status != "done":
        raise RuntimeError(f"the 1-step run ended {result.status}: {result.error} (see {run.dir / 'run.log'})")
    warm = getattr(procs, "last", None)
    if getattr(warm, "cpu_s", None) is not None:  # a forked run is the warm process's child, not ours
        cpu = warm.cpu_s
    return wall, read_scalars(run.dir).wall_time_s, cpu


def run(ctx: Context) -> Section:
    from experiments.sweep.processes import Processes
    from experiments.sweep.spec import load_spec
    from experiments.sweep.validate import check_spec
    from experiments.sweep.warm import Warm

    class Remembering(Processes):  # the last process started: a forked run reports its CPU time
        def start(self, *args, **kwargs):
            self.last = super().start(*args, **kwargs)
            return self.last

    s = ctx.settings
    reps = 1 if s.smoke else min(s.reps, MAX_REPS)
    section = Section("startup", "Sweeps: per-run start-up overhead, fresh process vs warm fork")
    load_before = load_average()
    samples = {name: (Timing(), Timing(), Timing(), Timing()) for name in ("cold", "warm", "first warm")}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        path = Path(tmp) / "startup.yaml"
        path.write_text(yaml.safe_dump(SPEC, sort_keys=False))
        spec = load_spec(path)
        checked = check_spec(spec)
        warm = Warm()
        procs = {"cold": Processes(), "warm": Remembering(warm)}
        retried: list[str] = []

        def measure(name: str) -> None:  # one sweep folder (one environment: one warm process), as in a sweep
            for _ in range(MAX_RETRIES + 1):
                restarts = len(warm.restarts)
                wall, training, cpu = timed_run(spec, checked, Path(tmp) / "sweep", procs[name.split()[-1]])
                if name != "warm" or len(warm.restarts) == restarts:
                    break
                retried.append(warm.restarts[-1])  # it waited for a new warm process's imports: again
            for timing, value in zip(samples[name], (wall, training, wall - training, cpu)):
                timing.samples.append(value)

        try:
            measure("first warm")
            for r in range(reps):
                for name in ("cold", "warm") if r % 2 == 0 else ("warm", "cold"):
                    measure(name)
        finally:
            warm.close()
    table = Table(
        ["start", "run wall time", "training (TensorBoard events)", "per-run overhead", "CPU time of the run"],
        title=f"one 1-step run of a tiny GPT (1 thread), {reps} interleaved repetition(s)",
    )
    for name, label in (
        ("cold", "fresh `python cli.py fit` (`--no-warm`)"),
        ("warm", "forked from the warm process (default)"),
        ("first warm", "first warm run (waits for the warm process's imports; once per sweep)"),
    ):
        table.add(label, *(timing.fmt("s") for timing in samples[name]))
    section.tables.append(table)
    cold, warm_overhead = samples["cold"][2].median, samples["warm"][2].median
    loads = [f"{load[0]:.2f}" if load else "n/a" for load in (load_before, load_average())]
    section.notes.append(
        f"Per-run overhead {cold:.2f} s cold, {warm_overhead:.2f} s warm ({cold - warm_overhead:.2f} s saved per run); "
        f"1-minute load average {loads[0]} before, {loads[1]} after, on {os.cpu_count()} CPUs: other processes "
        "on the machine inflate the wall times, less the CPU times."
    )
    if retried:
        section.notes.append(
            f"{len(retried)} warm run(s) measured again: a source file changed meanwhile (another engineer's edit), "
            f"so the warm process imported the code again before it ({retried[-1]})."
        )
    if warm.off:
        section.notes.append(f"Warm starts were refused ({warm.off}): the warm figures are fresh processes.")
    section.targets.append(
        Target(
            "sweep per-run overhead, warm start (s)",
            None if warm.off else warm_overhead,
            OVERHEAD_TARGET_S,
            higher_is_better=False,
            detail=f"cold {cold:.2f} s; wall time of a 1-step run minus its training time",
        )
    )
    section.data = {
        name: {"wall": w.to_json(), "training": t.to_json(), "overhead": o.to_json(), "cpu": c.to_json()}
        for name, (w, t, o, c) in samples.items()
    } | {"warm_off": warm.off, "retried": retried, "load_average_before": load_before}
    return section
