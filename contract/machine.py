"""Facts about the machine a run or a benchmark ran on (no torch: the benchmarks and `run.json` share them)."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name: Linux gives it in /proc/cpuinfo (`platform.processor()` is often empty there)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()
