"""Numbers as the report's tables spell them: n/a for what is not finite."""

from __future__ import annotations

import math

from experiments.analysis.comparison import Analysis


def has_trainable(analysis: Analysis) -> bool:
    """The ledger records trainable parameters (ledgers older than `params_trainable` do not: their reports
    keep their columns)."""
    return any(math.isfinite(cell.stat("params_trainable")) for cell in analysis.cells)


def has_spikes(analysis: Analysis) -> bool:
    """The ledger records loss spikes (runs from before `LossSpikes` do not: their reports keep their columns)."""
    return any(cell.spikes_text() != "n/a" for cell in analysis.cells)


def has_step_time(analysis: Analysis) -> bool:
    """The ledger records step times (runs from before `StepTime` do not: their reports keep their columns)."""
    return any(cell.step_time_text() != "n/a" for cell in analysis.cells)


def fixed(value: float, digits: int = 4) -> str:
    """`value` to `digits` decimals; n/a when not finite."""
    return "n/a" if not math.isfinite(value) else f"{value:.{digits}f}"


def p_text(value: float) -> str:
    """A p-value: three significant digits, scientific below 1e-4."""
    return "n/a" if not math.isfinite(value) else (f"{value:.3g}" if value >= 1e-4 else f"{value:.1e}")


def count_text(value: float) -> str:
    """A parameter or FLOP count with a k/M/G/T unit."""
    if not math.isfinite(value):
        return "n/a"
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.0f}"
