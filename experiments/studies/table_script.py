"""The command line of a study script that turns a sweep folder into one markdown table: the table is
written next to the ledger (so it is committed with the results it reads) and printed."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import numpy as np


def run(
    argv: list[str] | None, doc: str, table: Callable[..., str], filename: str, post_hoc: bool = False,
    into_last: bool = False, then: Callable[[Path], object] | None = None,
) -> int:  # fmt: skip
    """Parses `sweep_dir` (and, with `post_hoc`, any post hoc folders after it), writes `table(sweep_dir, ...)`
    to `sweep_dir/filename` (with `into_last`, to the last post hoc folder's, leaving the pre-registered verdict
    beside its own sweep) and prints it; then `then(sweep_dir)` (a script's figure beside its table)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path)
    if post_hoc:
        parser.add_argument("post_hoc_dirs", type=Path, nargs="*", help="post hoc folders the verdict reads too")
    args = parser.parse_args(argv)
    later = getattr(args, "post_hoc_dirs", ())
    text = table(args.sweep_dir, *later)
    ((later[-1] if into_last and later else args.sweep_dir) / filename).write_text(text)
    print(text)
    if then:
        then(args.sweep_dir)
    return 0


def run_lines(
    argv: list[str] | None, doc: str, lines: Callable[..., list[str]], filename: str, post_hoc: bool = False,
    into_last: bool = False, then: Callable[[Path], object] | None = None,
) -> int:  # fmt: skip
    """`run` for a verdict script, whose function gives the Markdown lines."""
    return run(argv, doc, lambda *folders: "\n".join(lines(*folders)) + "\n", filename, post_hoc, into_last, then)


def mean_std(values: list[float], digits: int = 3) -> str:
    """`mean ± sample std` to `digits` decimals (the mean alone for one value, n/a for none)."""
    if not values:
        return "n/a"
    spread = f" ± {np.std(values, ddof=1):.{digits}f}" if len(values) > 1 else ""
    return f"{np.mean(values):.{digits}f}{spread}"
