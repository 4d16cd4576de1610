"""The Dynamic Tanh study's verdicts, derived from its ledgers by the rules its specs state before any run
(`dyt_gpt.yaml`, `dyt_vit.yaml`): DyT against LayerNorm at each size (TOST within the spec's margin), the GPT's
α0 sensitivity, RMSNorm beside them, as Markdown for the README.

    python -m experiments.studies.dyt.verdict experiments/studies/dyt/results/dyt_gpt \
experiments/studies/dyt/results/dyt_vit [experiments/studies/dyt/results/dyt_vit_wide ...]

Folders after the first two are post hoc sweeps of either family (`dyt_vit_wide.yaml`, `dyt_gpt_wide.yaml`: the
same cells over a wider learning-rate search; the family is the one whose DyT cells the sweep has), read by the
same rule and labelled post hoc; they never change the pre-registered lines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from experiments.analysis.comparison import CellResult, analyse
from experiments.analysis.formatting import p_text
from experiments.analysis.stats import Comparison, paired_difference
from experiments.records.layout import LEDGER_NAME, SWEEP_INFO
from experiments.records.ledger import Ledger

# family -> (the metric compared, its margin, whether higher is better, DyT's cells)
FAMILIES = {
    "gpt": ("test/loss", 0.02, False, ("dyt-a0.5", "dyt-a0.2")),
    "vit": ("test/acc", 0.02, True, ("dyt-a0.5",)),
}


def _interval(c: Comparison) -> str:
    return (f"{c.diff:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}], p = {p_text(c.p_value)}, "
            f"TOST p = {p_text(c.equivalence_p)}")  # fmt: skip


def _cells(sweep_dir: Path) -> dict[tuple[str, str], CellResult]:
    """(cell, size) -> its final runs: `dyt-a0.5,size=d64` -> ("dyt-a0.5", "d64")."""
    cells = analyse(Ledger(sweep_dir / LEDGER_NAME), _info(sweep_dir)).cells
    return {tuple(c.name.replace("size=", "").split(",")): c for c in cells}


def family_verdicts(family: str, sweep_dir: Path, label: str | None = None) -> list[str]:
    """`label` names the lines (the family by default; a post hoc sweep says so)."""
    metric, margin, higher, dyts = FAMILIES[family]
    family = label or family
    cells = _cells(sweep_dir)
    sizes = sorted({size for _, size in cells}, key=lambda s: int(s.lstrip("d")))
    names = ("layernorm", "rmsnorm", *dyts)
    missing = [(n, s) for s in sizes for n in names if (n, s) not in cells or not cells[n, s].values(metric)]
    if not sizes or missing:
        return [f"- {family}: the final runs of {len(missing)} cell(s) have not ended: no verdict yet"]

    def diff(name: str, size: str, reference: str = "layernorm") -> Comparison:
        return paired_difference(cells[name, size].values(metric), cells[reference, size].values(metric), margin)

    # DyT at the better of its α0 by the final runs' validation metric (GPT); the ViT has one
    val = metric.replace("test/", "val/")
    pick = max if higher else min
    best = pick(dyts, key=lambda n: sum(pick(cells[n, s].values(val).values()) for s in sizes))
    dyt = [diff(best, s) for s in sizes]
    worse = [(c.ci_high < 0) if higher else (c.ci_low > 0) for c in dyt]
    label = "reproduced" if all(c.equivalent for c in dyt) else "not reproduced" if any(worse) else "inconclusive"
    at = lambda cs: "; ".join(f"{s}: {_interval(c)}" for s, c in zip(sizes, cs))  # noqa: E731
    lines = [f"- **{family}: DyT matches LayerNorm: {label}.** {best} − layernorm on {metric}, paired by seed, each at "
             f"its tuned lr (±{margin}): {at(dyt)}."]  # fmt: skip
    if len(dyts) == 2:
        alpha = [diff(dyts[0], s, dyts[1]) for s in sizes]
        sensitive = any(c.ci_low > 0 or c.ci_high < 0 for c in alpha)
        label = "reproduced" if sensitive else "not reproduced" if all(c.equivalent for c in alpha) else "inconclusive"
        lines.append(f"- **{family}: α0-sensitive: {label}.** {dyts[0]} − {dyts[1]} on {metric}: {at(alpha)}.")
    lines.append(f"- {family}: rmsnorm − layernorm on {metric}: {at([diff('rmsnorm', s) for s in sizes])}.")
    return lines


def _family(sweep_dir: Path) -> str:
    """The family whose DyT cells (exactly) the sweep has."""
    dyts = {cell["name"].split(",")[0] for cell in _info(sweep_dir)["cells"]} - {"layernorm", "rmsnorm"}
    return next(family for family, (*_, cells) in FAMILIES.items() if dyts == set(cells))


def _info(sweep_dir: Path) -> dict:
    return json.loads((sweep_dir / SWEEP_INFO).read_text())


def verdicts(gpt_dir: Path, vit_dir: Path, *post_hoc_dirs: Path) -> list[str]:
    lines = family_verdicts("gpt", gpt_dir) + family_verdicts("vit", vit_dir)
    for folder in post_hoc_dirs:
        family = _family(folder)
        lines += family_verdicts(family, folder, f"{family}, post hoc ({folder.name})")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print(__doc__)
        return 2
    text = "\n".join(verdicts(*map(Path, args))) + "\n"
    (Path(args[0]) / "verdict.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
