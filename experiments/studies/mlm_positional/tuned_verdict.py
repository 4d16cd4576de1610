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
from pathlib import Path

from experiments.analysis import decisions as rules
from experiments.analysis.comparison import CellResult
from experiments.analysis.stats import Comparison, paired_difference
from experiments.analysis.sweep_results import load
from experiments.records.values import format_value

METRIC = "test/loss"
SCHEMES = ("pos_encoding=learned", "pos_encoding=none", "pos_encoding=rope")


def _finished(
    sweep_dir: Path, names: tuple[str, ...]
) -> tuple[dict[str, CellResult], dict[str, str], dict[str, list[str]]] | None:
    """The cells' results, each one's chosen point (`key=value, ...`) and the unbracketed keys of each, or None
    before their final runs."""
    sweep = load(sweep_dir)
    if sweep.missing(names, METRIC):
        return None
    unbracketed = sweep.unbracketed()
    chosen = {
        name: ", ".join(f"{k.rpartition('.')[2]} {format_value(v)}" for k, v in zip(sweep.keys, sweep.chosen(name)))
        + "".join(f" (unbracketed: {k})" for k in unbracketed.get(name, []))
        for name in names
    }
    return sweep.cells, chosen, unbracketed


def _label(c: Comparison, guard: rules.Guard | None, artefact: str, survives: str) -> str:
    """The spec's rule, as the bullet's predicate: `artefact` when the CI lies below 0 (the tuned cell leaves the
    plateau), else `survives`; inconclusive by the bracketing rule when a compared cell's search ended at its
    grid's edge."""
    verdict = rules.decide(rules.Verdict(artefact if rules.side(c) == "below" else survives), guard)
    return f"is {verdict}{rules.why(verdict)}" if verdict.guard else verdict.label


def verdicts(tuned_dir: Path, scale_dir: Path | None = None) -> list[str]:
    """One Markdown bullet per pre-registered question: its figures from the ledgers and its label by the rule."""
    tuned = _finished(tuned_dir, SCHEMES)
    if tuned is None:
        return [f"- the final runs of {tuned_dir.name} have not ended: no verdict yet"]
    cells, chosen, unbracketed = tuned
    learned, none, rope = (cells[name].values(METRIC) for name in SCHEMES)
    plateau = paired_difference(learned, none)
    label = _label(plateau, rules.bracketing(unbracketed, SCHEMES[:2]), "is an lr artefact", "survives tuning")
    lines = [
        f"- **The learned-position plateau {label}.** learned − none on {METRIC}, each at its tuned lr "
        f"(learned: {chosen[SCHEMES[0]]}; none: {chosen[SCHEMES[1]]}): {rules.interval(plateau, n=True)}.",
        f"- RoPE − learned (RoPE at {chosen[SCHEMES[2]]}): {rules.interval(paired_difference(rope, learned), n=True)}.",
    ]
    scaled = _finished(scale_dir, SCHEMES[:1]) if scale_dir else None
    if scaled is not None:
        table = paired_difference(scaled[0][SCHEMES[0]].values(METRIC), learned)
        edges = {f"{name} ({folder.name})": keys for folder, found in ((scale_dir, scaled[2]), (tuned_dir, unbracketed))
                 for name, keys in found.items() if name == SCHEMES[0]}  # fmt: skip
        label = _label(table, rules.bracketing(edges, edges), "is a step-size artefact of the table",
                       "is not the table's step size")  # fmt: skip
        lines.append(
            f"- **The plateau {label}.** learned at its own (lr, positional_lr_scale) ({scaled[1][SCHEMES[0]]}) "
            f"− learned at its tuned lr alone: {rules.interval(table, n=True)}."
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
