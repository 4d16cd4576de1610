"""`python cli.py bench [--smoke] [--out DIR] [--sections a,b] ...`: the performance benchmark (`experiments.bench`)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch

from experiments.bench import DEFAULT_OUT, SECTIONS, run_benchmark
from experiments.bench.common import FULL, POSITIONAL_SCHEMES, SMOKE


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cli.py bench", description="The suite's performance benchmark.")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, one repetition (checks that it runs)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"results folder (default {DEFAULT_OUT})")
    parser.add_argument(
        "--sections",
        type=lambda text: [w.strip() for w in text.split(",") if w.strip()],
        default=list(SECTIONS),
        help=f"comma-separated subset of: {', '.join(SECTIONS)} (e.g. training,vit)",
    )
    parser.add_argument(
        "--compile", action="store_true", help="also time torch.compile (cold compile and steady state)"
    )
    parser.add_argument(
        "--reps", type=int, help="interleaved repetitions (default 7; caps seqlen's 5 and generation's 3/1)"
    )
    parser.add_argument(
        "--gen-uncached-schemes",
        type=lambda text: tuple(w.strip() for w in text.split(",") if w.strip()),
        help="generation: positional schemes that also run without the KV cache at batch > 1 "
        "(default: all; each costs ~20–60 s on 2 cores)",
    )
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    args = parser.parse_args(argv)
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown or not args.sections:
        parser.error(f"unknown section(s) {unknown or args.sections}; choose from {','.join(SECTIONS)}")
    bad = [p for p in args.gen_uncached_schemes or () if p not in POSITIONAL_SCHEMES]
    if bad:
        parser.error(f"unknown positional scheme(s) {bad}; choose from {','.join(POSITIONAL_SCHEMES)}")
    if args.reps is not None and args.reps < 1:
        parser.error("--reps must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    threads = torch.get_num_threads()
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        return _run(args, argv)
    finally:
        torch.set_num_threads(threads)


def _run(args: argparse.Namespace, argv: list[str] | None) -> int:
    """The settings the flags ask for, then the benchmark."""
    settings = SMOKE if args.smoke else FULL
    settings = replace(settings, compile=args.compile and not args.smoke)
    if args.gen_uncached_schemes is not None:
        settings = replace(settings, gen_uncached_schemes=args.gen_uncached_schemes)
    if args.reps:

        def fewer(n: int) -> int:  # seqlen and generation run fewer repetitions by default
            return min(n, args.reps)

        settings = replace(
            settings,
            reps=args.reps,
            lightning_reps=args.reps,
            seq_reps=fewer(settings.seq_reps),
            gen_reps=tuple(map(fewer, settings.gen_reps)),
        )
    command = "python cli.py bench " + " ".join(sys.argv[1:] if argv is None else argv)
    return run_benchmark(settings, args.sections, args.out, command, args.strict)
