"""Studies 18 and 19's verdicts, derived from their ledgers by the rules their specs state before any run: where
each (parametrization, size)'s learning-rate search put its optimum, in steps of the x2 grid from the smallest size's
(`mup_width.yaml`: SP's optimum falls with width, µP's holds, wider µP is better at every rate; `completep_depth.yaml`:
CompleteP's optimum holds with depth, µP's moves). A claim whose cells include an unbracketed one is inconclusive
by the bracketing rule (`analysis.decisions`). `verdict.md` also tables each size's optimum and test loss; beside it,
`lr_curves.png` (validation loss against learning rate, a line per size: the papers' Fig. 1).

    python -m experiments.studies.mup.verdict experiments/studies/mup/results/mup_width
    python -m experiments.studies.mup.verdict experiments/studies/mup/results/completep_depth
    # post hoc: mup_width's SP beside the µP re-run (verdict.md and the plot go to the post hoc folder)
    python -m experiments.studies.mup.verdict experiments/studies/mup/results/mup_width \
        experiments/studies/mup/results/mup_width_anchored
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from experiments.analysis import decisions as rules
from experiments.analysis.sweep_results import SweepResults, load
from experiments.studies import table_script

LR = "model.optim.lr"


def steps(lr: float, reference: float) -> float:
    """How many x2 grid steps `lr` lies above `reference`."""
    return math.log2(lr / reference)


class Study:
    """A ladder of (parametrization, size) cells, each with its search: cell -> {size -> optimum}. With post hoc
    sweeps of the same ladder, a parametrization they ran is read from the last of them instead (a re-run of one
    cell beside the pre-registered sweep's others)."""

    def __init__(self, results: SweepResults, *post_hoc: SweepResults):
        self.results = results
        ladder = results.info["ladder"]
        self.sizes = [s["name"] for s in ladder["sizes"]]
        self.key = {name: tuple(pair) for name, pair in ladder["cells"].items()}  # "mup,size=w64" -> (mup, w64)
        self.cells = sorted({cell for cell, _ in self.key.values()})
        self.source = {cell: results for cell in self.cells}  # parametrization -> the sweep its runs come from
        for later in post_hoc:
            self.source |= {cell: later for cell, _ in later.info["ladder"]["cells"].values()}

    def name(self, cell: str, size: str) -> str:
        return next(n for n, k in self.key.items() if k == (cell, size))

    def optimum(self, cell: str, size: str) -> float | None:
        chosen = self.source[cell].chosen(self.name(cell, size))
        return chosen[0] if chosen else None

    def missing(self) -> list[str]:
        return [self.name(c, s) for c in self.cells for s in self.sizes if self.optimum(c, s) is None]

    def guard(self, cell: str) -> rules.Guard | None:
        unbracketed = self.source[cell].unbracketed()
        return rules.bracketing(unbracketed, [self.name(cell, s) for s in self.sizes])

    def final(self, cell: str, size: str) -> list[float]:
        """The final runs' test losses."""
        found = self.source[cell].cells.get(self.name(cell, size))
        return list(found.values("test/loss").values()) if found else []

    def offsets(self, cell: str) -> list[float]:
        """Each size's optimum in grid steps from the smallest size's."""
        first = self.optimum(cell, self.sizes[0])
        return [steps(self.optimum(cell, s), first) for s in self.sizes]

    def curve(self, cell: str, size: str) -> dict[float, list[float]]:
        """lr -> the search seeds' validation losses (nan: diverged)."""
        search = self.source[cell].searches[self.name(cell, size)]
        return {point[0]: values for point, values in sorted(search.points.items())}


def holds(offsets: list[float]) -> rules.Verdict:
    if all(abs(o) <= 1 for o in offsets):
        return rules.Verdict(rules.REPRODUCED, "every optimum within one x2 step of the first size's")
    return rules.Verdict(rules.NOT_REPRODUCED, "an optimum 2 or more x2 steps from the first size's")


def falls(offsets: list[float]) -> rules.Verdict:
    if offsets[-1] <= -2 and all(b <= a for a, b in zip(offsets, offsets[1:], strict=False)):
        return rules.Verdict(rules.REPRODUCED, f"the largest size's optimum {offsets[-1]:+.0f} steps, never rising")
    if all(abs(o) <= 1 for o in offsets):
        return rules.Verdict(rules.NOT_REPRODUCED, "every optimum within one x2 step of the first size's")
    return rules.Verdict(rules.INCONCLUSIVE, "moved, but not 2 steps down without rising")


def moves(offsets: list[float]) -> rules.Verdict:
    if abs(offsets[-1]) >= 2:
        return rules.Verdict(rules.REPRODUCED, f"the deepest size's optimum {offsets[-1]:+.0f} steps away")
    if all(abs(o) <= 1 for o in offsets):
        return rules.Verdict(rules.NOT_REPRODUCED, "every optimum within one x2 step of the first size's")
    return rules.Verdict(rules.INCONCLUSIVE, "moved 2 steps at an inner size only")


def wider_is_better(study: Study, cell: str) -> rules.Verdict:
    """At each rate of the initial grid, the mean validation loss falls from each size to the next."""
    grid = study.results.info["tune"]["grid"][LR]
    curves = [study.curve(cell, s) for s in study.sizes]
    spread = rules.seed_spread(v for c in curves for v in c.values())
    noise = spread if math.isfinite(spread) else 0.0  # one search seed: no estimate, any rise counts
    worse = falls_everywhere = 0
    for lr in grid:
        means = [float(np.mean(c[lr])) if lr in c else math.nan for c in curves]
        for narrow, wide in zip(means, means[1:], strict=False):
            if math.isfinite(wide) and (not math.isfinite(narrow) or wide < narrow):  # a diverged narrower: falls
                falls_everywhere += 1
            elif not math.isfinite(wide) or wide - narrow > noise:
                worse += 1
    pairs = len(grid) * (len(curves) - 1)
    if falls_everywhere == pairs:
        return rules.Verdict(rules.REPRODUCED, f"lower at every one of {len(grid)} rates")
    if worse:
        return rules.Verdict(rules.NOT_REPRODUCED, f"{worse} of {pairs} (rate, next size) pairs worse beyond noise")
    return rules.Verdict(rules.INCONCLUSIVE, "not lower everywhere, but within the seed noise")


# study -> its claims: (wording, cell, rule on the offsets or on the study)
CLAIMS: dict[str, list[tuple[str, str, Callable]]] = {
    "model.arch.d_model": [
        ("SP's optimum falls with width", "sp", falls),
        ("µP's optimum holds across widths", "mup", holds),
        ("Under µP, wider is better at every learning rate", "mup", None),
    ],
    "model.arch.n_layers": [
        ("CompleteP's optimum holds with depth", "completep", holds),
        ("µP's optimum moves with depth", "mup", moves),
    ],
}


def verdicts(sweep_dir: Path, *post_hoc_dirs: Path) -> list[str]:
    study = Study(load(sweep_dir), *map(load, post_hoc_dirs))
    if study.missing():
        return [f"- {len(study.missing())} (parametrization, size) cell(s) have not chosen a rate yet: no verdict"]
    if post_hoc_dirs:
        return [f"Post hoc: {', '.join(p.name for p in post_hoc_dirs)}'s parametrizations replace {sweep_dir.name}'s.",
                "", *claim_lines(study)]  # fmt: skip
    return claim_lines(study)


def claim_lines(study: Study) -> list[str]:
    axis = next(k for k in CLAIMS if k in study.results.info["ladder"]["sizes"][0]["overrides"])
    lines = []
    for wording, cell, rule in CLAIMS[axis]:
        verdict = wider_is_better(study, cell) if rule is None else rule(study.offsets(cell))
        verdict = rules.decide(verdict, study.guard(cell))
        offsets = ", ".join(f"{s} {o:+.0f}" for s, o in zip(study.sizes, study.offsets(cell), strict=True))
        lines.append(f"- **{wording}: {verdict}.**{rules.why(verdict)} Optimum in x2 steps from {study.sizes[0]}: "
                     f"{offsets}.")  # fmt: skip
    return [*lines, "", *optima_table(study)]


def optima_table(study: Study) -> list[str]:
    rows = ["| cell | size | optimum lr | val/loss there (search seeds) | test/loss (final seeds) | bracketed |",
            "|---|---|---:|---:|---:|---|"]  # fmt: skip
    for cell in study.cells:
        unbracketed = study.source[cell].unbracketed()
        for size in study.sizes:
            name, lr = study.name(cell, size), study.optimum(cell, size)
            val = table_script.mean_std(study.curve(cell, size).get(lr, []))
            test = table_script.mean_std(study.final(cell, size))
            rows.append(f"| {cell} | {size} | {lr:g} | {val} | {test} | {'no' if name in unbracketed else 'yes'} |")
    return rows


def plot(study: Study, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(study.cells), figsize=(5 * len(study.cells), 4), sharey=True, squeeze=False)
    for ax, cell in zip(axes[0], study.cells, strict=True):
        for size in study.sizes:
            curve = study.curve(cell, size)
            ax.plot(list(curve), [np.mean(v) for v in curve.values()], marker="o", label=size)
        ax.set(xscale="log", xlabel="peak learning rate", title=cell, ylabel="validation loss (search seeds)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    def lines(sweep_dir: Path, *post_hoc_dirs: Path) -> list[str]:
        found = verdicts(sweep_dir, *post_hoc_dirs)
        if any(line.startswith("- **") for line in found):
            out = (post_hoc_dirs or (sweep_dir,))[-1] / "lr_curves.png"
            plot(Study(load(sweep_dir), *map(load, post_hoc_dirs)), out)
        return found

    return table_script.run_lines(argv, __doc__, lines, "verdict.md", post_hoc=True, into_last=True)


if __name__ == "__main__":
    raise SystemExit(main())
