"""The Dynamic Tanh study's verdicts, derived from its ledgers by the rules its specs state before any run
(`dyt_gpt.yaml`, `dyt_vit.yaml`): DyT against LayerNorm at each size (TOST within the spec's margin), the GPT's
α0 sensitivity, RMSNorm beside them, as Markdown for the README. A comparison touching a cell whose
learning-rate search left an end open is inconclusive by the bracketing rule (`analysis.decisions`).

    python -m experiments.studies.dyt.verdict experiments/studies/dyt/results/dyt_gpt \
experiments/studies/dyt/results/dyt_vit [experiments/studies/dyt/results/dyt_vit_wide ...]

`--out FILE` writes the verdict there instead of the first folder's `verdict.md` (a re-run's verdict beside its
ledger: `dyt_vit_rerun.yaml` is read as the ViT's folder). Folders after the first two are post hoc sweeps of either
family (`dyt_vit_wide.yaml`, `dyt_gpt_wide.yaml`: the same cells over a wider learning-rate search; the family is
the one whose DyT cells the sweep has), read by the same rule and labelled post hoc; they never change the
pre-registered lines.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from experiments.analysis import decisions as rules
from experiments.analysis.stats import Comparison, paired_difference
from experiments.analysis.sweep_results import load

# family -> (the metric compared, its margin, whether higher is better, DyT's cells)
FAMILIES = {
    "gpt": ("test/loss", 0.02, False, ("dyt-a0.5", "dyt-a0.2")),
    "vit": ("test/acc", 0.02, True, ("dyt-a0.5",)),
}


def _split(name: str) -> tuple[str, str]:
    """`dyt-a0.5,size=d64` -> ("dyt-a0.5", "d64")."""
    return tuple(name.replace("size=", "").split(","))


def family_verdicts(family: str, sweep_dir: Path, label: str | None = None) -> list[str]:
    """`label` names the lines (the family by default; a post hoc sweep says so)."""
    metric, margin, higher, dyts = FAMILIES[family]
    family = label or family
    sweep = load(sweep_dir)
    cells = sweep.keyed(_split)
    sizes = sorted({size for _, size in cells}, key=lambda s: int(s.lstrip("d")))
    names = ("layernorm", "rmsnorm", *dyts)
    missing = [(n, s) for s in sizes for n in names if (n, s) not in cells or not cells[n, s].values(metric)]
    if not sizes or missing:
        return [f"- {family}: the final runs of {len(missing)} cell(s) have not ended: no verdict yet"]
    unbracketed = sweep.unbracketed()
    worse = "below" if higher else "above"

    def diff(name: str, size: str, reference: str = "layernorm") -> tuple[Comparison, rules.Guard | None]:
        c = paired_difference(cells[name, size].values(metric), cells[reference, size].values(metric), margin)
        return c, rules.bracketing(unbracketed, (f"{name},size={size}", f"{reference},size={size}"))

    # DyT at the better of its α0 at each size, by the mean over seeds of the final runs' validation metric
    val = metric.replace("test/", "val/")
    pick = max if higher else min
    best = {s: pick(dyts, key=lambda n: statistics.mean(cells[n, s].values(val).values())) for s in sizes}
    dyt = [diff(best[s], s) for s in sizes]
    # the α0 not chosen could have won from a better rate: a claim about DyT at its best α0 needs every α0 bracketed
    every_alpha = [rules.bracketing(unbracketed, [f"{n},size={s}" for n in dyts]) for s in sizes]
    # the spec: a claim is inconclusive by the bracketing rule when any cell it compares is unbracketed, so the guards
    # apply to the claim, not size by size (a clean size's "not reproduced" does not override them)
    guards = [guard for (_, g), a in zip(dyt, every_alpha) for guard in (g, a)]
    matches = rules.decide(rules.combine([rules.equivalence(c, worse) for c, _ in dyt]), *guards)
    at = lambda cs: "; ".join(f"{s}: {rules.interval(c, tost=True)}" for s, (c, _) in zip(sizes, cs))  # noqa: E731
    chosen = ", ".join(f"{best[s]} at {s}" for s in sizes) if len(dyts) > 1 else dyts[0]
    lines = [f"- **{family}: DyT matches LayerNorm: {matches}.**{rules.why(matches)} DyT ({chosen}) − layernorm "
             f"on {metric}, paired by seed, each at its tuned lr (±{margin}): {at(dyt)}."]  # fmt: skip
    if len(dyts) == 2:
        alpha = [diff(dyts[0], s, dyts[1]) for s in sizes]
        # "α0-sensitive": a CI excluding 0 at either size; not reproduced if equivalent at both
        sensitive = rules.decide(
            rules.combine([rules.differs(c) for c, _ in alpha], positive="any", negative="all"), *(g for _, g in alpha)
        )
        lines.append(f"- **{family}: α0-sensitive: {sensitive}.**{rules.why(sensitive)} {dyts[0]} − {dyts[1]} on "
                     f"{metric}: {at(alpha)}.")  # fmt: skip
    lines.append(f"- {family}: rmsnorm − layernorm on {metric}: {at([diff('rmsnorm', s) for s in sizes])}.")
    return lines


def _family(sweep_dir: Path) -> str:
    """The family whose DyT cells (exactly) the sweep has."""
    dyts = {cell["name"].split(",")[0] for cell in load(sweep_dir).info["cells"]} - {"layernorm", "rmsnorm"}
    return next(family for family, (*_, cells) in FAMILIES.items() if dyts == set(cells))


def verdicts(gpt_dir: Path, vit_dir: Path, *post_hoc_dirs: Path) -> list[str]:
    lines = family_verdicts("gpt", gpt_dir) + family_verdicts("vit", vit_dir)
    for folder in post_hoc_dirs:
        family = _family(folder)
        lines += family_verdicts(family, folder, f"{family}, post hoc ({folder.name})")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    out = Path(args.pop(args.index("--out") + 1)) if "--out" in args else None
    args = [a for a in args if a != "--out"]
    if len(args) < 2:
        print(__doc__)
        return 2
    text = "\n".join(verdicts(*map(Path, args))) + "\n"
    (out or Path(args[0]) / "verdict.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
