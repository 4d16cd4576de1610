"""The figures a study README quotes, recomputed from a committed ledger (`results/<spec>/results.csv`)
and spelled as the READMEs spell them: a cell's per-seed values, their mean, median and spread, and
paired differences by seed (`scipy.stats.ttest_rel`, as the ledger one-liner of the studies index).

The table scripts build their tables from these, and `tests/experiments/studies/test_readme_quotes.py`
checks every figure it declares against the README that quotes it, so a README cannot drift from its
ledger. Numbers are computed from the ledger's full-precision values, never from rounded ones.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from contract.run_folder import DONE
from experiments.analysis.stats import Comparison, paired_difference
from experiments.records.layout import LEDGER_NAME
from experiments.records.ledger import Ledger

MINUS = "\u2212"  # the READMEs' minus sign


def seeds(sweep_dir: Path, cell: str, metric: str) -> dict[int, float]:
    """{seed: value} of the cell's finished (`done`) runs that record `metric`, in seed order."""
    rows = Ledger(sweep_dir / LEDGER_NAME).rows.values()
    found = {
        int(r["seed"]): float(r[metric]) for r in rows if r["cell"] == cell and r["status"] == DONE and r.get(metric)
    }
    if not found:
        raise KeyError(f"{sweep_dir / LEDGER_NAME}: no done run of cell {cell!r} records {metric!r}")
    return dict(sorted(found.items()))


def paired(cell: Mapping[int, float], reference: Mapping[int, float], margin: float | None = None) -> Comparison:
    """cell − reference, paired by seed (the seeds both have); `margin`: with a TOST against ±margin."""
    return paired_difference(cell, reference, margin)


def by_seed(cell: Mapping[int, float], reference: Mapping[int, float]) -> list[float]:
    """The per-seed differences cell − reference, in seed order."""
    return [cell[s] - reference[s] for s in sorted(set(cell) & set(reference))]


def number(value: float, digits: int = 3) -> str:
    """`value` to `digits` decimals with the READMEs' minus sign."""
    return f"{value:.{digits}f}".replace("-", MINUS)


def signed(value: float, digits: int = 3) -> str:
    """`value` to `digits` decimals with its sign, `+0.050` or `−0.024`."""
    return f"{value:+.{digits}f}".replace("-", MINUS)


def interval(c: Comparison, digits: int = 3, scale: float = 1.0) -> str:
    """The 95% CI of a paired difference, `[−0.062, +0.159]` (`scale` 100: in points)."""
    return f"[{signed(c.ci_low * scale, digits)}, {signed(c.ci_high * scale, digits)}]"


def difference(c: Comparison, digits: int = 3, scale: float = 1.0) -> str:
    """A paired difference and its 95% CI, `+0.048 [−0.062, +0.159]`."""
    return f"{signed(c.diff * scale, digits)} {interval(c, digits, scale)}"


def mean_std(values: Sequence[float] | Mapping[int, float], digits: int = 3) -> str:
    """`mean ± sample std`, `0.21 ± 0.06`."""
    values = list(values.values()) if isinstance(values, Mapping) else list(values)
    return f"{number(statistics.mean(values), digits)} ± {number(statistics.stdev(values), digits)}"


def mean(values: Sequence[float] | Mapping[int, float], digits: int = 3) -> str:
    values = list(values.values()) if isinstance(values, Mapping) else list(values)
    return number(statistics.mean(values), digits)


def median(values: Sequence[float] | Mapping[int, float], digits: int = 2) -> str:
    values = list(values.values()) if isinstance(values, Mapping) else list(values)
    return number(statistics.median(values), digits)


def listed(values: Sequence[float] | Mapping[int, float], digits: int = 3, sign: bool = False) -> str:
    """Values in seed order, `0.21, 0.25, 0.13` (`sign`: `−0.038, +0.008`)."""
    values = list(values.values()) if isinstance(values, Mapping) else list(values)
    return ", ".join((signed if sign else number)(v, digits) for v in values)


def span(values: Sequence[float] | Mapping[int, float], digits: int = 3, scale: float = 1.0) -> str:
    """The smallest to the largest value, `0.024–0.050` (an en dash; each with its minus sign)."""
    values = list(values.values()) if isinstance(values, Mapping) else list(values)
    low, high = sorted((min(values) * scale, max(values) * scale))
    return f"{number(low, digits)}–{number(high, digits)}"
