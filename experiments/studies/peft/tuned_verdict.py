"""The tuned PEFT study's verdicts for one family, derived from its ledger by the rule its spec states before
any run (`peft_gpt_tuned.yaml`): each method at its tuned learning rate against full fine-tuning (claims 1
and 3), LoRA r1 and r4 against r16 (claim 2), on the held-out test split, as a Markdown table. A comparison
touching a method whose search left an end open, or a method whose test loss never left the pre-trained
model's (`STARTS`: it learned nothing, so "matches" would compare nothing), is inconclusive by the bracketing or
the floor rule (`analysis.decisions`).

    python -m experiments.studies.peft.tuned_verdict experiments/studies/peft/results/peft_gpt_tuned
    python -m experiments.studies.peft.tuned_verdict experiments/studies/peft/results/peft_bert_tuned
"""

from __future__ import annotations

from pathlib import Path

from experiments.analysis import decisions as rules
from experiments.analysis.formatting import p_text
from experiments.analysis.stats import Comparison, paired_difference
from experiments.analysis.sweep_results import load
from experiments.analysis.tuning_report import initial_grid, sensitivity, sensitivity_cap
from experiments.records.values import format_value
from experiments.studies import table_script

METRIC = "test/loss"
MARGIN = 0.02  # nats: the equivalence margin the spec states before running
METHODS = ("full", "lora_r1", "lora_r4", "lora_r16", "adapter", "bitfit", "head_only")
PAIRS = [(m, "full") for m in METHODS[1:]] + [("lora_r1", "lora_r16"), ("lora_r4", "lora_r16")]
# spec -> the pre-trained model's loss on Tiny Shakespeare before any fine-tuning (README, "Ours": `cli.py validate`
# of the first study's pre-training runs, which the tuned pre-training runs reproduce to 5 decimals of validation loss)
STARTS = {
    "peft_gpt_tuned.yaml": 2.972,
    "peft_bert_tuned.yaml": 3.314,
    # measured before any of its fine-tunes (its header's step 2): the pre-trained BERT on the held-out test split at
    # each final seed's masks, 3.4047, 3.3918, 3.3878
    "peft_bert_tuned_rerun.yaml": 3.395,
}


def label(c: Comparison, *guards: rules.Guard | None) -> str:
    """The spec's rule: equivalent within the margin first (a difference below it is a match even when
    its CI excludes 0), else worse or better by the 95% CI, else inconclusive; inconclusive by a guard's rule
    when one holds."""
    verdict = rules.decide(rules.Verdict(rules.graded(c)), *guards)
    return str(verdict)


def table(sweep_dir: Path) -> str:
    """Each method's tuned lr, test loss and lr sensitivity; then one row per comparison: the two methods'
    tuned lr, the paired difference, its TOST p and label."""
    sweep = load(sweep_dir)
    cells = sweep.cells
    missing = sweep.missing(METHODS, METRIC)
    if missing:
        return f"The final runs of {missing} have not ended: no verdict yet.\n"
    found, metric = sweep.searches, sweep.metric
    lr = {m: "/".join(format_value(v) for v in found[m].chosen) for m in METHODS}
    unbracketed = sweep.unbracketed()
    start = STARTS.get(Path(sweep.info.get("spec", "")).name)
    floors = {m: rules.floor(cells[m].values(METRIC), start, False, m) if start else None for m in METHODS}
    grid, cap = initial_grid(sweep.info, sweep.keys), sensitivity_cap(found, higher=False)
    seeds = len(cells[METHODS[0]].values(METRIC))
    methods = [
        f"| method | tuned lr | `{METRIC}` (mean ± std, {seeds} seeds) | lr sensitivity |",
        "|---|---|---|---|",
        *(f"| {m} | {lr[m]}{' (unbracketed)' if m in unbracketed else ''} | "
          f"{table_script.mean_std(list(cells[m].values(METRIC).values()))}{' (floor)' if floors[m] else ''} | "
          f"{sensitivity(found[m], grid, cap, higher=False):.3f} |" for m in METHODS),
    ]  # fmt: skip
    rows = [
        f"| comparison on `{METRIC}` | tuned lr (on `{metric}`) | difference [95% CI] | TOST ±{MARGIN} p | verdict |",
        "|---|---|---|---|---|",
    ]
    for method, other in PAIRS:
        c = paired_difference(cells[method].values(METRIC), cells[other].values(METRIC), MARGIN)
        flags = "".join(f" (unbracketed: {m})" for m in (method, other) if m in unbracketed)
        verdict = label(c, rules.bracketing(unbracketed, (method, other)), floors[method], floors[other])
        rows.append(
            f"| {method} − {other} | {lr[method]} vs {lr[other]}{flags} | {c.diff:+.3f} [{c.ci_low:+.3f}, "
            f"{c.ci_high:+.3f}] | {p_text(c.equivalence_p)} | {verdict} |"
        )
    notes = [f"(floor): the method's {METRIC} has not left the pre-trained model's {start} (95% CI over seeds)."]
    footer = "\n\n" + notes[0] + "\n" if any(floors.values()) else "\n"
    return "\n".join(methods) + "\n\n" + "\n".join(rows) + footer


def main(argv: list[str] | None = None) -> int:
    return table_script.run(argv, __doc__, table, "tuned_verdict.md")


if __name__ == "__main__":
    raise SystemExit(main())
