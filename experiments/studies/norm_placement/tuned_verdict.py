"""The tuned norm-placement study's verdict, derived from its ledger by the rule its spec states before any
run (`norm_placement_tuned.yaml`): each claim's numbers and label, as Markdown for the README.

    python -m experiments.studies.norm_placement.tuned_verdict \
experiments/studies/norm_placement/results/norm_placement_tuned
"""

from __future__ import annotations

import json
from pathlib import Path

from experiments.analysis.comparison import analyse
from experiments.analysis.formatting import fixed, p_text
from experiments.analysis.stats import Comparison, paired_difference
from experiments.analysis.tuning_report import initial_grid, searches, sensitivity, sensitivity_cap
from experiments.records.layout import LEDGER_NAME, SWEEP_INFO
from experiments.records.ledger import Ledger
from experiments.records.values import format_value
from experiments.studies import table_script

METRIC = "test/loss"
MARGIN = 0.03  # the equivalence margin the spec states for "Pre-LN needs no warmup"
CELLS = ("L6-pre-warmup0", "L6-pre-warmup200", "L6-post-warmup0", "L6-post-warmup200")


def _interval(c: Comparison) -> str:
    return f"{c.diff:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}], p = {p_text(c.p_value)}"


def verdicts(sweep_dir: Path) -> list[str]:
    """One Markdown bullet per pre-registered claim: its figures from the ledger and its label by the rule."""
    info = json.loads((sweep_dir / SWEEP_INFO).read_text())
    ledger = Ledger(sweep_dir / LEDGER_NAME)
    cells = {c.name: c for c in analyse(ledger, info).cells}
    missing = [name for name in CELLS if name not in cells or not cells[name].values(METRIC)]
    if missing:
        return [f"- the final runs of {missing} have not ended: no verdict yet"]
    values = {name: cells[name].values(METRIC) for name in CELLS}
    post = paired_difference(values["L6-post-warmup0"], values["L6-post-warmup200"])
    post_label = "reproduced" if post.ci_low > 0 else "not reproduced" if post.ci_high < 0 else "inconclusive"
    pre = paired_difference(values["L6-pre-warmup0"], values["L6-pre-warmup200"], MARGIN)
    pre_label = (
        "reproduced" if pre.equivalent else "not reproduced" if pre.ci_low > 0 else "inconclusive"
    )  # equivalent within the margin; warmup helps (CI above 0); neither shown
    keys, metric, found = searches(ledger, info)
    grid, cap = initial_grid(info, keys), sensitivity_cap(found, higher=False)
    chosen = {name: found[name].chosen[0] for name in CELLS}
    spread = {name: sensitivity(found[name], grid, cap, higher=False) for name in CELLS}
    smaller = chosen["L6-post-warmup0"] < chosen["L6-pre-warmup0"]
    more_sensitive = spread["L6-post-warmup0"] > spread["L6-pre-warmup0"]
    lr_label = "reproduced" if smaller and more_sensitive else "partly reproduced" if smaller or more_sensitive else (
        "not reproduced"
    )
    lrs = ", ".join(f"{name} {format_value(chosen[name])} (sensitivity {fixed(spread[name], 3)})" for name in CELLS)
    return [
        f"- **Post-LN needs warmup: {post_label}.** Post-LN without − with warmup on {METRIC}, each at its tuned "
        f"lr: {_interval(post)} (n = {post.n}).",
        f"- **Pre-LN needs no warmup: {pre_label}.** Pre-LN without − with warmup: {_interval(pre)}; TOST within "
        f"±{MARGIN}: p = {p_text(pre.equivalence_p)}.",
        f"- **Post-LN needs a smaller learning rate: {lr_label}.** Chosen lr (on {metric}) and learning-rate "
        f"sensitivity (cap {fixed(cap, 3)}): {lrs}.",
    ]


def main(argv: list[str] | None = None) -> int:
    return table_script.run_lines(argv, __doc__, verdicts, "tuned_verdict.md")


if __name__ == "__main__":
    raise SystemExit(main())
