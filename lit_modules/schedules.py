"""Learning-rate schedules keyed by `OptimConfig.schedule`: each a function of (step, total steps, settings) giving
the multiplier of the peak rate, so the rate at a step depends on the step and the run's length alone. That is what
lets a decay branch resumed from a stable run's checkpoint follow the schedule a run of its length would have
followed from scratch (a sweep's `horizons:`).

- `cosine`: linear warmup, then a cosine from the peak to `final`·peak over the rest (the suite's default).
- `wsd`: warmup-stable-decay (Hu et al. 2024, MiniCPM; Hägele et al. 2024): linear warmup, the peak held, then a
  decay of `decay_shape` to `final` over the last `decay_fraction` of the steps (Hägele et al.: 20%, `1-sqrt`).
- `constant`: linear warmup, then the peak to the end (no decay: weight averaging's baseline).
- `linear`: linear warmup, then a straight line to `final` over the rest.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Schedule = Literal["cosine", "wsd", "constant", "linear"]
DecayShape = Literal["linear", "cosine", "1-sqrt"]

# decay_shape -> the fraction of the way from the floor up to the peak at progress p ∈ [0, 1] of the decay
DECAY_SHAPES: dict[DecayShape, Callable[[float], float]] = {
    "linear": lambda p: 1 - p,
    "cosine": lambda p: 0.5 * (1 + math.cos(math.pi * p)),
    "1-sqrt": lambda p: 1 - math.sqrt(p),  # Hägele et al. 2024's cooldown: steeper at first, then flat
}


@dataclass(frozen=True)
class ScheduleSettings:
    """What a schedule reads from `OptimConfig` (its docstring explains each)."""

    warmup_steps: int
    final: float
    decay_fraction: float = 0.2
    decay_shape: DecayShape = "1-sqrt"


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """Multiplier of the peak lr at `step`: linear warmup, then cosine to `min_ratio`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def decay_start(total_steps: int, s: ScheduleSettings) -> int:
    """The first step of `wsd`'s decay: `decay_fraction` of the run (rounded) ends it, never inside the warmup."""
    return max(s.warmup_steps, total_steps - round(s.decay_fraction * total_steps))


def _warmup_then(after: Callable[[int, int, ScheduleSettings], float]):
    def schedule(step: int, total_steps: int, s: ScheduleSettings) -> float:
        return (step + 1) / s.warmup_steps if step < s.warmup_steps else after(step, total_steps, s)

    return schedule


def _shape_between(step: int, start: int, end: int, shape: DecayShape, final: float) -> float:
    progress = min(1.0, max(0.0, (step - start) / max(1, end - start)))
    return final + (1 - final) * DECAY_SHAPES[shape](progress)


SCHEDULES: dict[Schedule, Callable[[int, int, ScheduleSettings], float]] = {
    "cosine": lambda step, total, s: warmup_cosine(step, s.warmup_steps, total, s.final),
    "wsd": _warmup_then(
        lambda step, total, s: _shape_between(step, decay_start(total, s), total, s.decay_shape, s.final)
    ),  # fmt: skip
    "constant": _warmup_then(lambda step, total, s: 1.0),
    "linear": _warmup_then(lambda step, total, s: _shape_between(step, s.warmup_steps, total, "linear", s.final)),
}
