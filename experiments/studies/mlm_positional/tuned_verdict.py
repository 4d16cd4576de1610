"""The tuned MLM positional study's verdict, derived from its ledgers by the rule its specs state before any
run (`mlm_positional_tuned.yaml`, `mlm_positional_tuned_scale.yaml`), as Markdown for the README.

    python -m experiments.studies.mlm_positional.tuned_verdict \
experiments/studies/mlm_positional/results/mlm_positional_tuned \
experiments/studies/mlm_positional/results/mlm_positional_tuned_scale

The second folder (the position table's own learning rate) is optional: without it, or before its final
runs, only the first two lines are written. Output: `tuned_verdict.md` in the first folder.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from experiments.analysis.comparison import CellResult, analyse
from experiments.analysis.formatting import p_text
from experiments.analysis.stats import Comparison, paired_difference
from experiments.analysis.tuning_report import searches
from experiments.records.layout import LEDGER_NAME, SWEEP_INFO
from experiments.records.ledger import Ledger
from experiments.records.values import format_value

METRIC = "test/loss"
SCHEMES = ("pos_encoding=learned", "pos_encoding=none", "pos_encoding=rope")


def _interval(c: Comparison) -> str:
    return f"{c.diff:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}], p = {p_text(c.p_value)} (n = {c.n})"


def _finished(sweep_dir: Path, names: tuple[str, ...]) -> tuple[dict[str, CellResult], dict[str, str]] | None:
    """The cells' results and each one's chosen point (`key=value, ...`), or None before their final runs."""
    info = json.loads((sweep_dir / SWEEP_INFO).read_text())
    ledger = Ledger(sweep_dir / LEDGER_NAME)
    cells = {c.name: c for c in analyse(ledger, info).cells}
    if any(name not in cells or not cells[name].values(METRIC) for name in names):
        return None
    keys, _, found = searches(ledger, info)
    chosen = {
        name: ", ".join(f"{k.rpartition('.')[2]} {format_value(v)}" for k, v in zip(keys, found[name].chosen))
        + "".join(f" (unbracketed: {k})" for k in found[name].unbracketed(keys))
        for name in names
    }
    return cells, chosen


def verdicts(tuned_dir: Path, scale_dir: Path | None = None) -> list[str]:
    """One Markdown bullet per pre-registered question: its figures from the ledgers and its label by the rule."""
    tuned = _finished(tuned_dir, SCHEMES)
    if tuned is None:
        return [f"- the final runs of {tuned_dir.name} have not ended: no verdict yet"]
    cells, chosen = tuned
    learned, none, rope = (cells[name].values(METRIC) for name in SCHEMES)
    plateau = paired_difference(learned, none)
    label = "is an lr artefact" if plateau.ci_high < 0 else "survives tuning"  # CI below 0: learned leaves it
    lines = [
        f"- **The learned-position plateau {label}.** learned − none on {METRIC}, each at its tuned lr "
        f"(learned: {chosen[SCHEMES[0]]}; none: {chosen[SCHEMES[1]]}): {_interval(plateau)}.",
        f"- RoPE − learned (RoPE at {chosen[SCHEMES[2]]}): {_interval(paired_difference(rope, learned))}.",
    ]
    scaled = _finished(scale_dir, SCHEMES[:1]) if scale_dir else None
    if scaled is not None:
        table = paired_difference(scaled[0][SCHEMES[0]].values(METRIC), learned)
        label = "a step-size artefact of the table" if table.ci_high < 0 else "not the table's step size"
        lines.append(
            f"- **The plateau is {label}.** learned at its own (lr, positional_lr_scale) ({scaled[1][SCHEMES[0]]}) "
            f"− learned at its tuned lr alone: {_interval(table)}."
        )
    elif scale_dir:
        lines.append(f"- the final runs of {scale_dir.name} have not ended: no verdict on the table's step size yet")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tuned_dir", type=Path)
    parser.add_argument("scale_dir", type=Path, nargs="?")
    args = parser.parse_args(argv)
    text = "\n".join(verdicts(args.tuned_dir, args.scale_dir)) + "\n"
    (args.tuned_dir / "tuned_verdict.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
