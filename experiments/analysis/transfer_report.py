"""A ladder that tuned once (`tune.transfer`, `experiments.sweep.transfer`): did the transferred values hold at the
largest size? Read from the ledger: each cell's final runs there (the transferred point, ×1) and its `verify` runs
(each tuned key at the spec's other factors, ×½ and ×2 by default, the other keys at their transferred values).

The rule, per cell at the largest size and per tuned key: the key's bracket is ×1 and the verify points along that
key; a point's score is its mean selection metric over the tune seeds (a diverged or failed run makes the point the
worst). The transfer of the key is **verified** when ×1 scores best, or worse than the best by no more than the seed
noise: twice the standard error of a difference of two such means, 2·s·√(2/n), s the seeds' pooled standard
deviation over the bracket's points (`decisions.seed_spread`) and n the tune seeds; with one tune seed there is no
noise estimate and ×1 must score best outright. Otherwise the transfer **failed** (×1 diverged, or a factor beat it
beyond the noise: the optimum moved with size); until every point of the bracket has a run at every tune seed it is
pending. A cell's transfer is verified when every key's is, failed when any key's failed.

A failed transfer is an unbracketed value at the largest size: `sweep_results.SweepResults.unbracketed` lists the
cell with `<key>: transfer failed`, so `decisions.bracketing` makes a comparison touching it inconclusive; a
verified one brackets the value there (the ×½ and ×2 runs are the bracket), whatever the search at the first size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from contract.metrics import higher_is_better
from contract.run_folder import DONE
from experiments.analysis.decisions import seed_spread
from experiments.analysis.formatting import fixed
from experiments.records.ledger import FINAL_PHASE, PHASE_COLUMN, SEARCH_MARK, VERIFY_PHASE, Ledger
from experiments.records.values import format_value

VERIFIED, FAILED, PENDING = "transfer verified", "transfer failed", "pending"
FAILED_MARK = ": transfer failed"  # `<key>: transfer failed`, as `SweepResults.unbracketed` lists a failed key
PENDING_MARK = ": transfer pending"  # and a key whose check has not ended: no verdict may rest on it yet

Point = tuple[float, ...]


@dataclass(frozen=True)
class KeyCheck:
    """One tuned key's bracket at the largest size.

    Args:
        key: the tuned key.
        factors: each point's factor of the transferred value -> its metric at each tune seed (nan: diverged or
            failed); the factors that have runs so far.
        outcome: VERIFIED, FAILED or PENDING (see the module docstring).
        allowance: how much worse than the best ×1 may score (0 without a noise estimate).
    """

    key: str
    factors: dict[float, list[float]]
    outcome: str
    allowance: float

    def mean(self, factor: float) -> float:
        values = self.factors.get(factor, [])
        return float(np.mean(values)) if values and all(map(math.isfinite, values)) else math.nan


@dataclass(frozen=True)
class TransferCheck:
    """One cell at the largest size: the values it received and each key's bracket."""

    cell: str
    transferred: Point
    keys: tuple[KeyCheck, ...]

    @property
    def outcome(self) -> str:
        outcomes = {k.outcome for k in self.keys}
        return FAILED if FAILED in outcomes else PENDING if PENDING in outcomes else VERIFIED

    def failed(self) -> list[str]:
        """The keys whose transfer failed."""
        return [k.key for k in self.keys if k.outcome == FAILED]


def _value(row: dict[str, str], metric: str) -> float:
    return float(row.get(metric) or "nan") if row["status"] == DONE else math.nan


def _judge(factors: dict[float, list[float]], wanted: int, seeds: int, higher: bool) -> tuple[str, float]:
    """A key's outcome and noise allowance from its bracket (factor -> metric per tune seed)."""
    if len(factors) < wanted or any(len(v) < seeds for v in factors.values()):
        return PENDING, math.nan
    spread = seed_spread(factors.values())
    allowance = 2 * spread * math.sqrt(2 / seeds) if math.isfinite(spread) else 0.0
    sign = -1.0 if higher else 1.0
    means = {f: sign * float(np.mean(v)) if all(map(math.isfinite, v)) else math.inf for f, v in factors.items()}
    best = min(means.values())
    verified = math.isfinite(means[1.0]) and means[1.0] - best <= allowance
    return (VERIFIED if verified else FAILED), allowance


def transfer_checks(ledger: Ledger, info: dict[str, Any]) -> dict[str, TransferCheck]:
    """Each cell at the largest size that has final runs: its transfer check; {} without `tune.transfer`."""
    tune = info.get("tune") or {}
    transfer = tune.get("transfer")
    if not transfer:
        return {}
    keys, metric, seeds = list(tune["grid"]), tune["metric"], list(tune["seeds"])
    declared, higher = [float(f) for f in transfer["verify"]], higher_is_better(metric)
    top = [name for name, (_, size) in info["ladder"]["cells"].items() if size == transfer["top"]]
    rows: dict[str, dict[Point, dict[int, float]]] = {}  # cell -> point -> tune seed -> metric
    transferred: dict[str, Point] = {}  # cell -> the point its final runs used
    for (cell, seed), row in ledger.rows.items():
        base, phase = cell.partition(SEARCH_MARK)[0], row.get(PHASE_COLUMN)
        if base not in top or phase not in (FINAL_PHASE, VERIFY_PHASE):
            continue
        point = tuple(float(row[k]) for k in keys)
        if phase == FINAL_PHASE:
            transferred[base] = point
        if seed in seeds:
            rows.setdefault(base, {}).setdefault(point, {})[seed] = _value(row, metric)
    out = {}
    for cell in (c for c in top if c in transferred):
        at, checks = transferred[cell], []
        for i, key in enumerate(keys):
            factors: dict[float, list[float]] = {}
            for point, values in rows.get(cell, {}).items():
                factor = next((f for f in declared if math.isclose(point[i], at[i] * f, rel_tol=1e-9)), None)
                if factor is not None and point[:i] + point[i + 1 :] == at[:i] + at[i + 1 :]:
                    factors[factor] = [values[s] for s in seeds if s in values]
            factors = dict(sorted(factors.items()))
            checks.append(KeyCheck(key, factors, *_judge(factors, len(declared), len(seeds), higher)))
        out[cell] = TransferCheck(cell, at, tuple(checks))
    return out


def unverified_keys(checks: dict[str, TransferCheck]) -> dict[str, list[str]]:
    """cell -> `<key>: transfer failed` for each key whose transfer failed, `<key>: transfer pending` for each whose
    check has not ended ([] verified)."""
    return {
        cell: [
            f"{k.key}{FAILED_MARK}" if k.outcome == FAILED else f"{k.key}{PENDING_MARK}"
            for k in check.keys
            if k.outcome in (FAILED, PENDING)
        ]  # fmt: skip
        for cell, check in checks.items()
    }


def transfer_section(ledger: Ledger, info: dict[str, Any]) -> str:
    """The ladder report's `### Transfer` part: the rule, and each cell's brackets and outcome at the largest size."""
    tune, checks = info["tune"], transfer_checks(ledger, info)
    transfer, metric = tune["transfer"], tune["metric"]
    rules = transfer.get("rule") or {}
    how = "; ".join(f"`{k}` × ({r['with']} / its value at {transfer['from']})^{r['power']:g}" for k, r in rules.items())
    factors = [float(f) for f in transfer["verify"]]
    head = ["cell", "key", "transferred", *(f"×{f:g}" for f in factors), "allowance", "transfer"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for check in checks.values():
        for i, key in enumerate(check.keys):
            means = [fixed(key.mean(f)) if f in key.factors else "—" for f in factors]
            outcome = f"**{key.outcome}**" if key.outcome == FAILED else key.outcome
            row = [f"`{check.cell}`", f"`{key.key}`", format_value(check.transferred[i]), *means,
                   fixed(key.allowance), outcome]  # fmt: skip
            lines.append("| " + " | ".join(row) + " |")
    text = (
        f"### Transfer\n\nTuned once: only the cells at `{transfer['from']}` searched; every other size ran at its "
        f"counterpart's choice, "
        + (f"scaled by {how}" if how else "unchanged")
        + f". At `{transfer['top']}` each tuned key ran at {', '.join(f'×{f:g}' for f in factors)} of its transferred "
        f"value (tune seeds {tune['seeds']}; ×1: the final runs, verify runs at a tune seed that is not a spec seed). "
        f"*Transfer verified*: ×1's mean "
        f"`{metric}` is the best of the bracket or within the seed noise of it (*allowance*: 2·s·√(2/n), s the pooled "
        "seed standard deviation over the bracket, n the tune seeds; 0 with one seed); otherwise *transfer failed*, "
        "and the verdicts treat the cell at that size as unbracketed."
    )
    return text + "\n\n" + ("\n".join(lines) if checks else "No cell at the largest size has final runs yet.")
