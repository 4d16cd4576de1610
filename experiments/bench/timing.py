"""Timing primitives: interleaved A/B repetitions, the machine's measured matmul peak, load.

Every comparison in the benchmark is interleaved: repetition r runs candidate A, then B, then C
(the order rotates each repetition), so a change in machine load hits all candidates alike
instead of whichever happened to run during it. Each candidate is warmed up first (allocator,
oneDNN primitive caches, lazy init) and its repetitions are summarised by the median with the
min–max range beside it.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from contract.machine import cpu_model


@dataclass
class Timing:
    """Seconds per call of one candidate, one sample per repetition."""

    samples: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    @property
    def reps(self) -> int:
        return len(self.samples)

    def rate(self, work: float) -> Rate:
        """`work` units per call -> units per second (median and range)."""
        return Rate(work / self.median, work / self.max, work / self.min)

    def fmt(self, unit: str = "ms") -> str:
        scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
        return f"{self.median * scale:.3g} {unit} ({self.min * scale:.3g}–{self.max * scale:.3g}, n={self.reps})"

    def to_json(self) -> dict:
        return {"median_s": self.median, "min_s": self.min, "max_s": self.max, "samples_s": self.samples}


@dataclass(frozen=True)
class Rate:
    median: float
    low: float
    high: float

    def fmt(self, digits: int = 4) -> str:
        return f"{self.median:.{digits}g} ({self.low:.{digits}g}–{self.high:.{digits}g})"

    def to_json(self) -> dict:
        return {"median": self.median, "low": self.low, "high": self.high}


def ratio_range(a: Timing, b: Timing) -> tuple[float, float, float]:
    """time(a) / time(b): the ratio of medians, and the range over paired repetitions."""
    pairs = [x / y for x, y in zip(a.samples, b.samples)]
    return a.median / b.median, min(pairs), max(pairs)


def paired_detail(ratio: tuple[float, float, float], threshold: float) -> str:
    """'paired reps lo–hi', flagged when the paired range straddles the threshold (a verdict that
    the run's noise could flip)."""
    text = f"paired reps {ratio[1]:.2f}–{ratio[2]:.2f}"
    return text + " (straddles the threshold: within noise)" if ratio[1] <= threshold <= ratio[2] else text


def time_call(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(
    candidates: dict[str, Callable[[], object]],
    reps: int,
    warmup: int = 1,
    inner: int = 1,
) -> dict[str, Timing]:
    """Time each candidate `reps` times, interleaved, after `warmup` untimed calls each.

    One sample is the mean of `inner` back-to-back calls. The order of candidates rotates each
    repetition (A B C, B C A, C A B, ...), so no candidate always runs first after another.
    """
    names = list(candidates)
    for name in names:
        for _ in range(warmup):
            candidates[name]()
    result = {name: Timing() for name in names}
    for r in range(reps):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            for _ in range(inner):
                candidates[name]()
            result[name].samples.append((time.perf_counter() - start) / inner)
    return result


def matmul_peak_flops(
    size: int = 2048, tries: int = 5, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> float:
    """The best FLOP/s of a size³ square matmul over `tries` (after one warm-up): the achievable
    matmul peak of this machine with torch's current thread count, used as MFU's denominator."""
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    a @ b
    sync()
    best = float("inf")
    for _ in range(tries):
        start = time.perf_counter()
        a @ b
        sync()
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best


def load_average() -> tuple[float, float, float] | None:
    try:
        return os.getloadavg()
    except OSError:  # not on every platform
        return None


def machine_info() -> dict:
    return {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "load_average": load_average(),
    }
