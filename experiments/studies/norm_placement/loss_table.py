"""The norm-placement study's table: each run's final validation loss by depth, placement, warmup and
learning rate, marking runs that sat on the unigram plateau.

A Post-LN model that fails here does not diverge: it collapses to predicting the characters'
unigram distribution (a loss of about 3.35 nats on Tiny Shakespeare) and stays there, so the ledger
records it as `done`. Whether a run was on that plateau, and until when, is read from its validation
curve (TensorBoard events); the ledger keeps only the final value.

    python -m experiments.studies.norm_placement.loss_table \
experiments/studies/norm_placement/results/norm_placement
"""

from __future__ import annotations

import math
from pathlib import Path

from contract.run_folder import DIVERGED, FINISHED
from experiments.records.events import read_scalars
from experiments.records.layout import LEDGER_NAME
from experiments.records.ledger import Ledger
from experiments.studies import table_script

PLATEAU = 3.2  # val/loss at or above this is the unigram plateau (unigram loss ≈ 3.35, trained runs < 2.8)
KEYS = ("model.arch.n_layers", "model.arch.norm_placement", "model.optim.warmup_steps", "model.optim.lr")


def describe(final: float, curve: dict[int, float]) -> str:
    """A run's final loss, with "(stuck)" when it ended on the plateau, or "(stuck to step N)" when it
    left it after the first validation (N: the last validation on the plateau)."""
    if not math.isfinite(final):
        return "non-finite"
    stuck = [step for step, loss in sorted(curve.items()) if math.isfinite(loss) and loss >= PLATEAU]
    if final >= PLATEAU:
        return f"**{final:.3f} (stuck)**"
    if stuck and stuck[0] == min(s for s, v in curve.items() if math.isfinite(v)):
        return f"**{final:.3f} (stuck to step {stuck[-1] + 1})**"
    return f"{final:.3f}"


def table(sweep_dir: Path) -> str:
    rows = [r for r in Ledger(sweep_dir / LEDGER_NAME).rows.values() if r["status"] in FINISHED]
    lrs = sorted({float(r["model.optim.lr"]) for r in rows})
    settings: dict[tuple[int, str, int], dict[float, list[str]]] = {}
    for row in sorted(rows, key=lambda r: int(r["seed"])):
        layers, placement, warmup, lr = (row[k] for k in KEYS)
        curve = read_scalars(sweep_dir / row["cell"] / f"seed{row['seed']}").curves.get("val/loss", {})
        final = float(row["val/loss"]) if row.get("val/loss") else math.nan
        key = (int(layers), placement, int(warmup))
        # a diverged run's last validation (its loss may still look like the plateau) is not its outcome
        shown = f"**diverged at step {row['diverged_at_step']}**" if row["status"] == DIVERGED else None
        settings.setdefault(key, {}).setdefault(float(lr), []).append(shown or describe(final, curve))
    lines = [
        f"Final validation loss per seed ({sweep_dir.name}; `python -m experiments.studies.norm_placement.loss_table "
        f"{sweep_dir}`); stuck: val/loss ≥ {PLATEAU} (the unigram plateau) at the end, or up to the step shown.",
        "",
        "| layers | placement | warmup | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " |",
        "| ---: | --- | ---: | " + " | ".join("---" for _ in lrs) + " |",
    ]
    for (layers, placement, warmup), by_lr in sorted(settings.items(), key=lambda kv: (-kv[0][0], kv[0][1], kv[0][2])):
        cells = " | ".join(", ".join(by_lr[lr]) if lr in by_lr else "—" for lr in lrs)
        lines.append(f"| {layers} | {placement} | {warmup} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return table_script.run(argv, __doc__, table, "loss_table.md")


if __name__ == "__main__":
    raise SystemExit(main())
