"""`tune.transfer` in a ladder spec: search once, at one rung, and carry the chosen values to every other rung.

    ladder: [{name: d64, model.arch.d_model: 64}, {name: d128, ...}, {name: d256, model.arch.d_model: 256}]
    tune:
      grid: {model.optim.lr: [1.0e-3, 2.0e-3, 4.0e-3]}
      transfer:
        from: d64          # the rung whose cells search (default: the first rung)
        rule: {model.optim.lr: {with: model.arch.d_model, power: -1}}   # optional (SP): see below
        verify: [0.5, 1, 2]                  # factors of the transferred value at the largest rung (the default)

Only the `from` rung's cells search (the rule of `experiments.sweep.tuning`, with its bracketing and extension);
every other cell runs its seeds at its counterpart's choice (the same cell at the `from` rung; with
`tune.search_on` too, that cell's counterpart): unchanged without a `rule` (µP, CompleteP: the optimum does not
move with width or depth), or, for each key a rule names, the chosen value × (the rung's `with` / the `from`
rung's `with`) ^ `power` (e.g. SP's lr ∝ 1/width).

At the largest rung (the last), each cell then verifies what it received: for each tuned key in turn, that key
at every `verify` factor of its transferred value (the other keys at theirs), each point at `tune.seeds`, in
`DIR/<cell>~<point>/seed<k>` with the ledger phase `verify`. The ×1 point is the cell's own final runs at the
tune seeds it shares with the spec's seeds (trained once); only tune seeds that are not spec seeds run ×1 again
as verify runs. Which verify runs a cell needs is a function of its counterpart's search, so of the ledger:
a ladder killed in any phase, or two sweeps sharing its folder, compute the same runs. The report judges them
(`experiments.analysis.transfer_report`: "transfer verified" or "transfer failed").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from experiments.sweep.ladder import Rung
from experiments.sweep.tuning import Point, Tune, TuneError

TRANSFER_KEYS = ("from", "rule", "verify")
RULE_KEYS = ("with", "power")
DEFAULT_VERIFY = (0.5, 1.0, 2.0)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _rounded(value: float) -> float:
    return float(f"{value:.12g}")  # as `tuning` writes its values: short names and flags


@dataclass(frozen=True)
class Rule:
    """A tuned key that scales with a rung key: value × (rung's `with` / `from` rung's `with`) ^ `power`."""

    key: str
    with_key: str
    power: float


@dataclass(frozen=True)
class Transfer:
    """A parsed `tune.transfer` (see the module docstring).

    Args:
        source: the rung whose cells search.
        top: the largest rung (the ladder's last), where each cell verifies its transferred values.
        rules: the keys that scale with a rung key; the others transfer unchanged.
        verify: the factors of each transferred value tried at `top`, ascending, 1 among them.
    """

    source: Rung
    top: Rung
    rules: tuple[Rule, ...] = ()
    verify: tuple[float, ...] = DEFAULT_VERIFY

    def scaled(self, names: Sequence[str], point: Point, source: Mapping[str, Any], to: Mapping[str, Any]) -> Point:
        """`point`, chosen by a cell with overrides `source`, as a cell with overrides `to` runs it."""
        factors = {r.key: (to[r.with_key] / source[r.with_key]) ** r.power for r in self.rules}
        return tuple(_rounded(v * factors[k]) if k in factors else v for k, v in zip(names, point))

    def at_top(self, overrides: Mapping[str, Any]) -> bool:
        """Whether a cell with these overrides is at the largest rung (where it verifies)."""
        return all(overrides.get(k) == v for k, v in self.top.overrides.items())

    def verify_points(self, point: Point) -> tuple[Point, ...]:
        """The points that verify `point` at the top rung: each key at each factor but 1, the others unchanged."""
        out = []
        for i in range(len(point)):
            out += [point[:i] + (_rounded(point[i] * f),) + point[i + 1 :] for f in self.verify if f != 1]
        return tuple(dict.fromkeys(out))

    def snapshot(self) -> dict[str, Any]:
        """What `sweep.json` keeps (the report reads the rungs, the rules and the factors)."""
        rule = {r.key: {"with": r.with_key, "power": r.power} for r in self.rules}
        return {"from": self.source.name, "top": self.top.name, "verify": list(self.verify)} | (
            {"rule": rule} if rule else {}
        )

    def describe(self) -> str:
        """The transfer in one sentence, for `--dry-run`."""
        rules = ", ".join(f"{r.key} × ({r.with_key} / {r.with_key} at {self.source.name})^{r.power:g}"
                          for r in self.rules)  # fmt: skip
        factors = ", ".join(f"×{f:g}" for f in self.verify)
        return (
            f"only the cells at size {self.source.name} search; the other sizes run at their choice "
            + (f"scaled by {rules}" if rules else "unchanged")
            + f"; at {self.top.name}, each tuned key is verified at {factors} of its transferred value"
        )


def parse_transfer(raw: Any, tune: Tune, rungs: tuple[Rung, ...]) -> Transfer | None:
    """`tune.transfer`, checked against the tuned keys and the ladder's rungs; None without one.

    Args:
        raw: the block as read (a mapping; {} for every default).
        tune: the `tune:` block it belongs to.
        rungs: the spec's ladder; () without one.
    """
    if raw is None:
        return None
    if not rungs:
        raise TuneError("tune.transfer: carries a search between the sizes of a `ladder:`; add a ladder, or drop "
                        "tune.transfer (without a ladder every cell searches)")  # fmt: skip
    if not isinstance(raw, Mapping) or any(k not in TRANSFER_KEYS for k in raw):
        raise TuneError(f"tune.transfer: needs a mapping with keys {list(TRANSFER_KEYS)}, got {raw!r}")
    names = [r.name for r in rungs]
    source = raw.get("from", names[0])
    if source not in names:
        raise TuneError(f"tune.transfer.from: {source!r} is not a size of the ladder; its sizes: {names}")
    if source == names[-1]:
        raise TuneError(f"tune.transfer.from: {source!r} is the largest size, where the transfer is verified; "
                        f"search at a smaller one of {names[:-1]}")  # fmt: skip
    rules = _rules(raw.get("rule") or {}, tune, rungs)
    verify = raw.get("verify", list(DEFAULT_VERIFY))
    if (
        not isinstance(verify, list)
        or not all(_number(f) and f > 0 for f in verify)
        or 1 not in verify
        or len(set(verify)) != len(verify)
        or len(verify) < 2
    ):
        raise TuneError(f"tune.transfer.verify: needs distinct positive factors including 1 and another (e.g. "
                        f"[0.5, 1, 2]), got {verify!r}")  # fmt: skip
    top = rungs[-1]
    return Transfer(rungs[names.index(source)], top, rules, tuple(sorted(float(f) for f in verify)))


def _rules(raw: Any, tune: Tune, rungs: tuple[Rung, ...]) -> tuple[Rule, ...]:
    """`tune.transfer.rule`: tuned keys -> {with: a rung key with a positive number at every rung, power: a number}."""
    if not isinstance(raw, Mapping):
        raise TuneError(f"tune.transfer.rule: needs a mapping of tuned keys to {{with: <size key>, power: <number>}},"
                        f" got {raw!r}")  # fmt: skip
    keys = list(rungs[0].overrides)
    rules = []
    for key, entry in raw.items():
        if key not in tune.names:
            raise TuneError(f"tune.transfer.rule: {key!r} is not a tuned key; tuned: {list(tune.names)}")
        if not isinstance(entry, Mapping) or set(entry) != set(RULE_KEYS):
            raise TuneError(f"tune.transfer.rule.{key}: needs {{with: <size key>, power: <number>}}, got {entry!r}")
        with_key, power = entry["with"], entry["power"]
        if with_key not in keys:
            raise TuneError(f"tune.transfer.rule.{key}.with: {with_key!r} is not a key the ladder sets; its keys: "
                            f"{keys}")  # fmt: skip
        values = {r.name: r.overrides[with_key] for r in rungs}
        if not all(_number(v) and v > 0 for v in values.values()):
            raise TuneError(f"tune.transfer.rule.{key}.with: {with_key} needs a positive number at every size, got "
                            f"{values}")  # fmt: skip
        if not _number(power):
            raise TuneError(f"tune.transfer.rule.{key}.power: needs a number (e.g. -1: ∝ 1/{with_key}), got "
                            f"{power!r}")  # fmt: skip
        rules.append(Rule(key, with_key, float(power)))
    return tuple(rules)
