"""Sweep parallelism: two single-thread training processes side by side against one two-thread
process, in total tokens/s, and the `--jobs` setting that follows for this machine.

One worker process per core is started once and kept: each builds the benchmark GPT, warms up,
says `ready`, then runs `run K THREADS` commands (torch.set_num_threads(THREADS), then K training
steps, timed inside the worker) until `exit`. Repetition r runs worker 0 alone with every core's
thread for K steps, then all workers with one thread each for K steps at once (alternating which
set-up comes first), so the two set-ups are interleaved like every other comparison and process
start-up (importing torch) is not in the figures. The side-by-side total is (tokens of all
workers) ÷ (the slowest worker's time).

    python -m experiments.bench.sweeps --worker --arch '{"d_model": 128, ...}' --batch 32 --seq 128
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from .common import Context
from .tables import Section, Table

ROOT = Path(__file__).resolve().parents[2]


def worker(arch: dict, batch: int, seq: int) -> None:
    import torch

    from models import GPT, ArchConfig

    from .common import TrainStep, token_batch

    torch.manual_seed(0)
    model = GPT(ArchConfig(**arch))
    ids, labels = token_batch(batch, seq, model.cfg.vocab_size)
    # plain fused AdamW: the suite's parameter groups change weight decay, not cost, and importing
    # them would import Lightning into every worker
    step = TrainStep(model, optimizer=torch.optim.AdamW(model.parameters(), fused=True)).on(ids, labels)
    cores = torch.get_num_threads()
    for threads in (1, cores):  # warm up under both thread counts
        torch.set_num_threads(threads)
        step()
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "exit":
            break
        k, threads = int(words[1]), int(words[2])
        torch.set_num_threads(threads)
        start = time.perf_counter()
        for _ in range(k):
            step()
        print(json.dumps({"seconds": time.perf_counter() - start, "tokens": k * ids.numel()}), flush=True)


class Worker:
    def __init__(self, arch: dict, batch: int, seq: int):
        cmd = [sys.executable, "-m", "experiments.bench.sweeps", "--worker"]
        cmd += ["--arch", json.dumps(arch), "--batch", str(batch), "--seq", str(seq)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def expect_ready(self) -> None:
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"sweep worker failed to start (exit code {self.proc.poll()}): {line!r}")

    def send(self, text: str) -> None:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def result(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"sweep worker died (exit code {self.proc.poll()})")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("exit")
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def run(ctx: Context) -> Section:
    s = ctx.settings
    section = Section("sweeps", "Sweeps: processes side by side vs threads in one process")
    cores = os.cpu_count() or 1
    arch = asdict(s.arch())
    k = s.sweep_steps
    reps = s.reps
    workers: list[Worker] = []
    try:
        workers = [Worker(arch, s.batch_size, s.seq_len) for _ in range(cores)]
        for w in workers:
            w.expect_ready()
        single, side = [], []

        def run_single() -> None:
            workers[0].send(f"run {k} {cores}")
            r = workers[0].result()
            single.append(r["tokens"] / r["seconds"])

        def run_side() -> None:
            for w in workers:
                w.send(f"run {k} 1")
            results = [w.result() for w in workers]
            side.append(sum(r["tokens"] for r in results) / max(r["seconds"] for r in results))

        for r in range(reps):
            for fn in (run_single, run_side) if r % 2 == 0 else (run_side, run_single):
                fn()
    finally:
        for w in workers:
            w.close()

    a, b = statistics.median(single), statistics.median(side)
    ratio = b / a
    pairs = [y / x for x, y in zip(single, side)]
    jobs = cores if ratio > 1.05 else 1
    table = Table(
        ["set-up", "total tokens/s (median, min–max)"],
        title=f"{cores} cores; {reps} interleaved repetitions of {k} training steps per worker "
        f"(benchmark GPT, batch {s.batch_size})",
    )
    table.add(f"1 process × {cores} threads", f"{a:.4g} ({min(single):.4g}–{max(single):.4g})")
    table.add(f"{cores} processes × 1 thread", f"{b:.4g} ({min(side):.4g}–{max(side):.4g})")
    section.tables.append(table)
    section.notes.append(
        f"{cores} single-thread processes give {ratio:.2f}× the total throughput of one {cores}-thread process "
        f"(paired {min(pairs):.2f}–{max(pairs):.2f}): best `--jobs` for this machine is {jobs}"
        + (" (one thread per job)." if jobs > 1 else " (one process using every core).")
    )
    section.data = {"single_process": single, "side_by_side": side, "ratio": ratio, "best_jobs": jobs, "cores": cores}
    return section


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true", required=True)
    parser.add_argument("--arch", type=json.loads, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--seq", type=int, required=True)
    args = parser.parse_args()
    worker(args.arch, args.batch, args.seq)


if __name__ == "__main__":
    main()
