"""The QK-norm / z-loss study's verdict, derived from its ledger by the rule its spec states before any run
(`qk_norm_zloss.yaml`): each claim's numbers and label at every size, then the mechanism (the last probe's
largest attention logit and log Z of each search run, by learning rate), as Markdown for the README.

    python -m experiments.studies.stability.verdict experiments/studies/stability/results/qk_norm_zloss
"""

from __future__ import annotations

import math
from pathlib import Path

from experiments.analysis import decisions as rules
from experiments.analysis.formatting import fixed, p_text
from experiments.analysis.stats import paired_difference
from experiments.analysis.sweep_results import load
from experiments.analysis.tuning_report import initial_grid, sensitivity, sensitivity_cap
from experiments.records.ledger import SEARCH_MARK, Ledger
from experiments.records.values import format_value
from experiments.studies import table_script

METRIC = "test/loss"
MARGIN = 0.02  # "neither costs loss at its best rate": the CI's upper end below +0.02 nats
LOWER_BY = 0.9  # "lowers LR sensitivity": below 0.9 of the baseline's at every size
BASELINE = ("none", "0.0")  # (qk_norm, z_loss)
VARIANTS = {"QK-layernorm": ("layernorm", "0.0"), "z-loss": ("none", "0.0001")}
MECHANISM = ("diagnostics/attn_max_logit", "diagnostics/log_z")


def cell_key(name: str) -> tuple[str, str, str]:
    """`qk_norm=layernorm,z_loss=0.0001,size=d64` -> ("layernorm", "0.0001", "d64")."""
    parts = dict(part.split("=", 1) for part in name.split(SEARCH_MARK)[0].split(","))
    return parts["qk_norm"], parts["z_loss"], parts["size"]


def verdicts(sweep_dir: Path) -> list[str]:
    """One Markdown bullet per pre-registered claim, and the mechanism table."""
    sweep = load(sweep_dir)
    cells = sweep.keyed(cell_key)
    sizes = sorted({size for _, _, size in cells}, key=lambda s: int(s.lstrip("d")))
    wanted = [(*variant, size) for size in sizes for variant in (BASELINE, *VARIANTS.values())]
    missing = [k for k in wanted if k not in cells or not cells[k].values(METRIC)]
    if not sizes or missing:
        return [f"- the final runs of {len(missing)} cell(s) have not ended: no verdict yet"]
    found = {cell_key(name): search for name, search in sweep.searches.items()}
    grid = initial_grid(sweep.info, sweep.keys)
    spread = {}
    for size in sizes:  # one cap per size: the worst finite loss any cell of that size reached
        cap = sensitivity_cap({k: s for k, s in found.items() if k[2] == size}, higher=False)
        spread |= {k: sensitivity(s, grid, cap, higher=False) for k, s in found.items() if k[2] == size}
    noise, how = sweep.sensitivity_noise()
    names, unbracketed = {cell_key(name): name for name in sweep.cells}, sweep.unbracketed()

    def guard(size: str, variant: tuple[str, str]) -> rules.Guard | None:
        """The grid does not extend (`extend: 0`): a cell whose search left an end open is unbracketed."""
        return rules.bracketing(unbracketed, [names[(*variant, size)], names[(*BASELINE, size)]])

    lines = []
    for claim, variant in VARIANTS.items():
        pairs = [(spread[(*variant, size)], spread[(*BASELINE, size)]) for size in sizes]
        label = rules.combine(
            [rules.decide(rules.sensitivity(v, b, noise, LOWER_BY), guard(size, variant))
             for size, (v, b) in zip(sizes, pairs)], negative="all")  # fmt: skip
        shown = "; ".join(f"{size}: {fixed(v, 3)} against {fixed(b, 3)}" for size, (v, b) in zip(sizes, pairs))
        lines.append(f"- **{claim} lowers LR sensitivity: {label}.** Sensitivity on {sweep.metric} (the mean excess "
                     f"over the best across the grid, diverged points at the size's cap), {claim} against neither: "
                     f"{shown}; noise allowance ±{fixed(noise, 3)}{rules.why(label)}.")  # fmt: skip
    costs = []
    for size in sizes:
        base = cells[(*BASELINE, size)].values(METRIC)
        for claim, variant in VARIANTS.items():
            c = paired_difference(cells[(*variant, size)].values(METRIC), base, MARGIN)
            costs.append((f"{claim} at {size}", c, guard(size, variant)))
    label = rules.combine([rules.decide(rules.noninferior(c, MARGIN), held) for _, c, held in costs])
    shown = "; ".join(
        f"{name} {c.diff:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}] (TOST ±{MARGIN}: p = {p_text(c.equivalence_p)})"
        for name, c, _ in costs
    )
    lines.append(
        f"- **Neither costs loss at its best rate: {label}.** {METRIC} − neither's, paired by seed, each "
        f"at its tuned lr: {shown}{rules.why(label)}."
    )
    lines.append(f"- Noise allowance: {how}")
    first_seed = str((sweep.info["tune"].get("seeds") or [10])[0])
    return lines + ["", *mechanism_table(sweep.ledger, sizes, first_seed)]


def mechanism_table(ledger: Ledger, sizes: list[str], seed: str) -> list[str]:
    """The last probe's largest attention logit and log Z of each search run at the first search `seed` (one
    run per point, so a re-run with more search seeds shows the same runs as the first), cell by lr (diverged:
    the run's last probe before it stopped, marked †)."""
    rows = [r for r in ledger.rows.values() if SEARCH_MARK in r["cell"] and r["seed"] == seed]
    lrs = sorted({float(r["model.optim.lr"]) for r in rows})
    head = ["size", "qk_norm", "z_loss", "diagnostic", *(format_value(lr) for lr in lrs)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in sizes:
        for qk, z in (BASELINE, *VARIANTS.values(), ("layernorm", "0.0001")):
            runs = {float(r["model.optim.lr"]): r for r in rows if cell_key(r["cell"]) == (qk, z, size)}
            for column in MECHANISM:
                values = []
                for lr in lrs:
                    row = runs.get(lr)
                    value = float(row.get(column) or "nan") if row else math.nan
                    mark = "†" if row and row["status"] != "done" else ""
                    values.append("n/a" if not math.isfinite(value) else f"{value:.2f}{mark}")
                lines.append("| " + " | ".join([size, qk, z, column.split("/", 1)[1], *values]) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    return table_script.run_lines(argv, __doc__, verdicts, "verdict.md")


if __name__ == "__main__":
    raise SystemExit(main())
