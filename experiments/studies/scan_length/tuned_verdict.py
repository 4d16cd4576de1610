"""The tuned SCAN study's verdict, derived from its ledger by the rule its spec states before any run
(`scan_length_tuned.yaml`): the precondition, each claim's numbers and label, as Markdown for the README.

    python -m experiments.studies.scan_length.tuned_verdict \
experiments/studies/scan_length/results/scan_length_tuned
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from experiments.analysis.comparison import analyse
from experiments.analysis.formatting import p_text
from experiments.analysis.stats import Comparison, paired_difference
from experiments.analysis.tuning_report import searches
from experiments.records.layout import LEDGER_NAME, SWEEP_INFO
from experiments.records.ledger import Ledger
from experiments.records.values import format_value
from experiments.studies import table_script

METRIC = "test/exact_match"
SCHEMES = ("sinusoidal", "learned", "t5", "rope")
SPLITS = ("simple", "length", "cutoff26")
PRECONDITION = 0.95  # every scheme's median on the simple split, or the study cannot tell
FAILS_BELOW = 0.20  # Lake & Baroni: a scheme "fails" the length split below this median
RELATIVE = ("rope", "t5")  # Csordás et al.: relative positions against learned absolute ones


def _cell(split: str, scheme: str) -> str:
    return f"split={split},pos_encoding={scheme}"


def _interval(c: Comparison) -> str:
    return f"{c.diff:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}], p = {p_text(c.p_value)}"


def verdicts(sweep_dir: Path) -> list[str]:
    """One Markdown bullet per pre-registered check: its figures from the ledger and its label by the rule."""
    info = json.loads((sweep_dir / SWEEP_INFO).read_text())
    ledger = Ledger(sweep_dir / LEDGER_NAME)
    cells = {c.name: c for c in analyse(ledger, info).cells}
    wanted = [_cell(split, scheme) for split in SPLITS for scheme in SCHEMES]
    missing = [name for name in wanted if name not in cells or not cells[name].values(METRIC)]
    if missing:
        return [f"- the final runs of {len(missing)} cell(s) have not ended ({missing[0]}, …): no verdict yet"]
    values = {name: cells[name].values(METRIC) for name in wanted}
    median = {name: float(np.median(list(v.values()))) for name, v in values.items()}
    _, metric, found = searches(ledger, info)
    chosen = ", ".join(
        f"{scheme} {format_value(found[_cell('simple', scheme)].chosen[0])}" for scheme in SCHEMES
    )  # the simple split's search sets every split's rate (tune.search_on)
    simple = {scheme: median[_cell("simple", scheme)] for scheme in SCHEMES}
    met = all(m >= PRECONDITION for m in simple.values())
    shown = ", ".join(f"{s} {m:.1%}" for s, m in simple.items())
    lines = [
        f"- **Precondition (every scheme ≥ {PRECONDITION:.0%} on the simple split): {'met' if met else 'not met'}.** "
        f"Median {METRIC} over seeds: {shown}. Learning rates chosen on the simple split's {metric}: {chosen}."
    ]
    diffs = {s: paired_difference(values[_cell("cutoff26", s)], values[_cell("cutoff26", "learned")]) for s in RELATIVE}
    if not met:
        relative_label = "inconclusive (precondition not met)"
    elif all(d.ci_low > 0 for d in diffs.values()):
        relative_label = "reproduced"
    elif all(d.ci_high < 0 for d in diffs.values()):
        relative_label = "not reproduced"
    else:
        relative_label = "inconclusive"
    lines.append(
        f"- **Relative positions generalise to longer outputs (Csordás et al.): {relative_label}.** On cutoff26, "
        + "; ".join(f"{s} − learned {_interval(d)} (n = {d.n})" for s, d in diffs.items())
        + "."
    )
    length = {scheme: median[_cell("length", scheme)] for scheme in SCHEMES}
    every_fails = all(m < FAILS_BELOW for m in length.values())
    fails_label = "reproduced" if every_fails else "not reproduced"
    fails_label = fails_label if met else "inconclusive (precondition not met)"
    lines.append(
        f"- **Every scheme fails the length split (Lake & Baroni): {fails_label}.** Median {METRIC} "
        f"(fails below {FAILS_BELOW:.0%}): " + ", ".join(f"{s} {m:.1%}" for s, m in length.items()) + "."
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    return table_script.run_lines(argv, __doc__, verdicts, "tuned_verdict.md")


if __name__ == "__main__":
    raise SystemExit(main())
