"""The tuned PEFT study's verdicts for one family, derived from its ledger by the rule its spec states before
any run (`peft_gpt_tuned.yaml`): each method at its tuned learning rate against full fine-tuning (claims 1
and 3), LoRA r1 and r4 against r16 (claim 2), on the held-out test split, as a Markdown table.

    python -m experiments.studies.peft.tuned_verdict experiments/studies/peft/results/peft_gpt_tuned
    python -m experiments.studies.peft.tuned_verdict experiments/studies/peft/results/peft_bert_tuned
"""

from __future__ import annotations

import json
from pathlib import Path

from experiments.analysis.comparison import analyse
from experiments.analysis.formatting import p_text
from experiments.analysis.stats import Comparison, paired_difference
from experiments.analysis.tuning_report import initial_grid, searches, sensitivity, sensitivity_cap
from experiments.records.layout import LEDGER_NAME, SWEEP_INFO
from experiments.records.ledger import Ledger
from experiments.records.values import format_value
from experiments.studies import table_script

METRIC = "test/loss"
MARGIN = 0.02  # nats: the equivalence margin the spec states before running
METHODS = ("full", "lora_r1", "lora_r4", "lora_r16", "adapter", "bitfit", "head_only")
PAIRS = [(m, "full") for m in METHODS[1:]] + [("lora_r1", "lora_r16"), ("lora_r4", "lora_r16")]


def label(c: Comparison) -> str:
    """The spec's rule: equivalent within the margin first (a difference below it is a match even when
    its CI excludes 0), else worse or better by the 95% CI, else inconclusive."""
    if c.equivalent:
        return "matches"
    return "worse" if c.ci_low > 0 else "better" if c.ci_high < 0 else "inconclusive"


def table(sweep_dir: Path) -> str:
    """Each method's tuned lr, test loss and lr sensitivity; then one row per comparison: the two methods'
    tuned lr, the paired difference, its TOST p and label."""
    info = json.loads((sweep_dir / SWEEP_INFO).read_text())
    ledger = Ledger(sweep_dir / LEDGER_NAME)
    cells = {c.name: c for c in analyse(ledger, info).cells}
    missing = [m for m in METHODS if m not in cells or not cells[m].values(METRIC)]
    if missing:
        return f"The final runs of {missing} have not ended: no verdict yet.\n"
    keys, metric, found = searches(ledger, info)
    lr = {m: "/".join(format_value(v) for v in found[m].chosen) for m in METHODS}
    unbracketed = {m: found[m].unbracketed(keys) for m in METHODS}
    grid, cap = initial_grid(info, keys), sensitivity_cap(found, higher=False)
    seeds = len(cells[METHODS[0]].values(METRIC))
    methods = [
        f"| method | tuned lr | `{METRIC}` (mean ± std, {seeds} seeds) | lr sensitivity |",
        "|---|---|---|---|",
        *(f"| {m} | {lr[m]}{' (unbracketed)' if unbracketed[m] else ''} | "
          f"{table_script.mean_std(list(cells[m].values(METRIC).values()))} | "
          f"{sensitivity(found[m], grid, cap, higher=False):.3f} |" for m in METHODS),
    ]  # fmt: skip
    rows = [
        f"| comparison on `{METRIC}` | tuned lr (on `{metric}`) | difference [95% CI] | TOST ±{MARGIN} p | verdict |",
        "|---|---|---|---|---|",
    ]
    for method, other in PAIRS:
        c = paired_difference(cells[method].values(METRIC), cells[other].values(METRIC), MARGIN)
        flags = "".join(f" (unbracketed: {m})" for m in (method, other) if unbracketed[m])
        rows.append(
            f"| {method} − {other} | {lr[method]} vs {lr[other]}{flags} | {c.diff:+.3f} [{c.ci_low:+.3f}, "
            f"{c.ci_high:+.3f}] | {p_text(c.equivalence_p)} | {label(c)} |"
        )
    return "\n".join(methods) + "\n\n" + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    return table_script.run(argv, __doc__, table, "tuned_verdict.md")


if __name__ == "__main__":
    raise SystemExit(main())
