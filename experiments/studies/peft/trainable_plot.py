"""Final validation loss against trainable parameters, one point per fine-tuning method (PEFT study).

    python -m experiments.studies.peft.trainable_plot \
experiments/studies/peft/results/peft_gpt,experiments/studies/peft/results/peft_gpt_high_lr \
experiments/studies/peft/results/peft_bert,experiments/studies/peft/results/peft_bert_high_lr

Reads each sweep folder's `results.csv` (one panel per argument, in the order given; `A,B` makes one
panel of two folders' runs, e.g. a sweep and its extension to other learning rates). A cell named
`<method>-lr<lr>` is that method at that learning rate (the learning rate read from the ledger's
`model.optim.lr` column); each method is shown at its learning rate with the lowest mean final metric
over seeds (chosen on the same validation split it is reported on), with the sample standard deviation
over seeds as its error bar, at its trainable parameter count (`params_trainable`) on a log axis. Only
`done` runs count. Writes `plots/loss_vs_trainable.png` and the same numbers as a table,
`plots/loss_vs_trainable.md`, under the folders' common parent (`--out` to choose another place).
The table also pairs each method with `full` by seed (both at their best learning rates): the mean
difference, its 95% t interval and the verdict of the study's rule (`verdict`).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

import matplotlib

from contract.run_folder import DONE

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from contract.files import write_atomic
from experiments.analysis.stats import Comparison, paired_difference
from experiments.records.layout import LEDGER_NAME
from experiments.records.ledger import Ledger

LR_COLUMN = "model.optim.lr"
TRAINABLE_COLUMN = "params_trainable"
REFERENCE = "full"  # every method is compared with full fine-tuning
MATCH_MARGIN = 0.02  # nats: a method whose paired CI lies below +MATCH_MARGIN matches full fine-tuning


@dataclass(frozen=True)
class Point:
    """One method at its best learning rate: the mean and sample std of `metric` over its done runs."""

    method: str
    lr: str
    trainable: int
    mean: float
    std: float
    n: int
    others: dict[str, float]  # every learning rate tried -> its mean (the chosen one included)
    by_seed: dict[int, float]  # seed -> value at the chosen learning rate (for paired comparisons)


def method_of(cell: str) -> str:
    """`lora_r4-lr0.003` -> `lora_r4`; a cell without the suffix is a method by itself."""
    head, sep, _ = cell.rpartition("-lr")
    return head if sep else cell


def best_points(rows: list[dict[str, str]], metric: str = "val/loss") -> list[Point]:
    """Each method at its best learning rate (lowest mean `metric`), in the order methods first appear."""
    runs: dict[str, dict[str, list[dict[str, str]]]] = {}
    for row in rows:
        if row.get("status") == DONE and row.get(metric):
            runs.setdefault(method_of(row["cell"]), {}).setdefault(row.get(LR_COLUMN, ""), []).append(row)
    points = []
    for method, by_lr in runs.items():
        means = {lr: statistics.fmean(float(r[metric]) for r in group) for lr, group in by_lr.items()}
        lr = min(means, key=means.__getitem__)
        values = [float(r[metric]) for r in by_lr[lr]]
        trainable = {int(float(r[TRAINABLE_COLUMN])) for r in by_lr[lr]}
        if len(trainable) != 1:
            raise ValueError(f"{method} at lr {lr}: runs differ in {TRAINABLE_COLUMN} ({sorted(trainable)})")
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        by_seed = {int(r["seed"]): float(r[metric]) for r in by_lr[lr]}
        points.append(Point(method, lr, trainable.pop(), statistics.fmean(values), std, len(values), means, by_seed))
    return points


def verdict(comparison: Comparison, margin: float = MATCH_MARGIN) -> str:
    """The study's rule on a method − full difference of a lower-is-better metric."""
    if comparison.n < 2:
        return "n/a"
    if comparison.ci_high < 0:
        return "better"
    if comparison.ci_high < margin:
        return "matches (worse by < margin)" if comparison.ci_low > 0 else "matches"
    return "worse" if comparison.ci_low > 0 else "inconclusive"


def read_rows(sweep_dir: Path) -> list[dict[str, str]]:
    rows = list(Ledger(sweep_dir / LEDGER_NAME).rows.values())
    if not rows:
        raise SystemExit(f"error: {sweep_dir / LEDGER_NAME} has no runs")
    if TRAINABLE_COLUMN not in rows[0]:
        raise SystemExit(f"error: {sweep_dir / LEDGER_NAME} has no {TRAINABLE_COLUMN} column (an older ledger)")
    return rows


def plot(panels: dict[str, list[Point]], metric: str, path: Path) -> None:
    """One panel per sweep: each method's point with its error bar, labelled with its learning rate."""
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    for ax, (name, points) in zip(axes[0], panels.items()):
        for point in points:
            ax.errorbar(point.trainable, point.mean, yerr=point.std, fmt="o", capsize=3)
            ax.annotate(f"{point.method} ({point.lr})", (point.trainable, point.mean), fontsize="x-small",
                        xytext=(4, 4), textcoords="offset points")  # fmt: skip
        ax.set_xscale("log")
        ax.set_xlabel("trainable parameters (log)")
        ax.set_ylabel(f"final {metric}")
        ax.set_title(f"{name}: mean ± std over seeds, best lr per method", fontsize="medium")
        ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, buffer.getvalue())


def table(panels: dict[str, list[Point]], metric: str, command: str) -> str:
    lrs = sorted({lr for points in panels.values() for p in points for lr in p.others}, key=float)
    lines = [
        f"Each method at its best learning rate (lowest mean final `{metric}` over seeds); mean ± sample std "
        f"over the done runs (`{command}`).",
        "",
        f"| sweep | method | trainable params | best lr | {metric} | n | "
        + " | ".join(f"mean at lr {lr}" for lr in lrs) + " |",
        "| --- | --- | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in lrs) + " |",
    ]  # fmt: skip
    for name, points in panels.items():
        for p in points:
            at = " | ".join(f"{p.others[lr]:.4f}" if lr in p.others else "" for lr in lrs)
            lines.append(
                f"| {name} | {p.method} | {p.trainable:,} | {p.lr} | {p.mean:.4f} ± {p.std:.4f} | {p.n} | {at} |"
            )
    lines += [
        "",
        f"Against `{REFERENCE}` at its best learning rate, paired by seed (mean difference, 95% t interval; "
        f"matches: the interval below +{MATCH_MARGIN}; worse: above 0; better: below 0):",
        "",
        f"| sweep | method | − {REFERENCE} | 95% CI | p | verdict |",
        "| --- | --- | ---: | --- | ---: | --- |",
    ]
    for name, points in panels.items():
        reference = next((p for p in points if p.method == REFERENCE), None)
        for p in points:
            if reference is None or p is reference:
                continue
            c = paired_difference(p.by_seed, reference.by_seed)
            interval = f"[{c.ci_low:+.4f}, {c.ci_high:+.4f}]"
            lines.append(f"| {name} | {p.method} | {c.diff:+.4f} | {interval} | {c.p_value:.2g} | {verdict(c)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("panels", nargs="+", help="sweep folders, one panel each; A,B: one panel of both")
    parser.add_argument("--metric", default="val/loss", help="the ledger column plotted (default val/loss)")
    parser.add_argument("--out", type=Path, help="the figure goes to OUT/plots/ (default: the folders' common parent)")
    args = parser.parse_args(argv)
    groups = [[Path(d) for d in panel.split(",")] for panel in args.panels]
    panels = {dirs[0].name: best_points([r for d in dirs for r in read_rows(d)], args.metric) for dirs in groups}
    out = args.out or Path(os.path.commonpath([d.resolve() for dirs in groups for d in dirs]))
    png = out / "plots" / "loss_vs_trainable.png"
    plot(panels, args.metric, png)
    command = "python -m experiments.studies.peft.trainable_plot " + " ".join(args.panels)
    text = table(panels, args.metric, command)
    write_atomic(png.with_suffix(".md"), text)
    print(text + f"\nwrote {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
