"""The Peri-LN study's verdict, derived from its ledger by the rule its spec states before any run
(`peri_ln.yaml`): loss, residual growth with depth and loss spikes, Peri-LN against Pre-LN at each depth (Post-LN
and the reordered norm beside them), as Markdown for the README.

    python -m experiments.studies.peri_ln.verdict experiments/studies/peri_ln/results/peri_ln [POST_HOC_DIR ...]
"""

from __future__ import annotations

import json
from pathlib import Path

from experiments.analysis.comparison import CellResult, analyse
from experiments.analysis.formatting import p_text
from experiments.analysis.stats import Comparison, paired_difference
from experiments.records.layout import LEDGER_NAME, SWEEP_INFO
from experiments.records.ledger import SEARCH_MARK, Ledger
from experiments.studies import table_script
from experiments.studies.table_script import mean_std

LOSS, GROWTH, SPIKES = "test/loss", "diagnostics/residual_growth", "loss_spikes"
PLACEMENTS = ("pre", "peri", "post", "reordered")


def cell_key(name: str) -> tuple[str, str]:
    """`norm_placement=peri,size=L8` -> ("peri", "L8")."""
    parts = dict(part.split("=", 1) for part in name.split(SEARCH_MARK)[0].split(","))
    return parts["norm_placement"], parts["size"]


def _interval(c: Comparison) -> str:
    return f"{c.diff:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}], p = {p_text(c.p_value)}"


def _below(comparisons: list[Comparison]) -> str:
    """reproduced: every CI below 0; not reproduced: any above 0; otherwise inconclusive."""
    if all(c.ci_high < 0 for c in comparisons):
        return "reproduced"
    return "not reproduced" if any(c.ci_low > 0 for c in comparisons) else "inconclusive"


def _cells(sweep_dir: Path) -> dict[tuple[str, str], CellResult]:
    info = json.loads((sweep_dir / SWEEP_INFO).read_text())
    return {cell_key(c.name): c for c in analyse(Ledger(sweep_dir / LEDGER_NAME), info).cells}


def _claims(cells: dict[tuple[str, str], CellResult], depths: list[str], label: str = "") -> list[str]:
    """The three pre-registered claims, Peri-LN against Pre-LN at each depth, by the spec's rule."""
    loss = [_against_pre(cells, "peri", d, LOSS) for d in depths]
    growth = [_against_pre(cells, "peri", d, GROWTH) for d in depths]
    spikes = {(p, d): int(sum(cells[p, d].values(SPIKES).values())) for p in ("pre", "peri") for d in depths}
    more = all(spikes["pre", d] > spikes["peri", d] for d in depths)
    spike_label = "inconclusive" if not any(spikes.values()) else "reproduced" if more else "not reproduced"
    counted = [f"{spikes['pre', d]} against {spikes['peri', d]}" for d in depths]
    return [
        f"- **{label}Peri-LN beats Pre-LN: {_below(loss)}.** Peri − Pre on {LOSS}, paired by seed, each at its tuned "
        f"lr: {_at(depths, map(_interval, loss))}.",
        f"- **{label}Peri-LN keeps the residual stream from growing with depth: {_below(growth)}.** Growth = ln(RMS "
        f"after the last block / after the first) at the last probe; Peri − Pre: "
        f"{_at(depths, map(_interval, growth))}.",
        f"- **{label}Pre-LN spikes more: {spike_label}.** Loss spikes over the final runs (z > 6 over 50 steps), Pre "
        f"against Peri: {_at(depths, counted)}.",
    ]


def _at(depths: list[str], values) -> str:
    return "; ".join(f"{d}: {v}" for d, v in zip(depths, values))


def verdicts(sweep_dir: Path, *post_hoc_dirs: Path) -> list[str]:
    """One Markdown bullet per pre-registered claim, then the other placements against Pre-LN; then the claims
    again for each post hoc folder, its cells standing in for the pre-registered ones of the same name (paired
    by seed with the rest)."""
    cells = _cells(sweep_dir)
    depths = sorted({depth for _, depth in cells}, key=lambda d: int(d.lstrip("L")))
    missing = [(p, d) for d in depths for p in PLACEMENTS if (p, d) not in cells or not cells[p, d].values(LOSS)]
    if not depths or missing:
        return [f"- the final runs of {len(missing)} cell(s) have not ended: no verdict yet"]
    lines = _claims(cells, depths)
    for placement in ("post", "reordered"):  # beside the verdicts, by the same comparisons
        shown = _at(depths, (f"{LOSS} {_interval(_against_pre(cells, placement, d, LOSS))}; growth "
                             f"{_interval(_against_pre(cells, placement, d, GROWTH))}" for d in depths))  # fmt: skip
        lines.append(f"- {placement} − Pre (not a pre-registered claim): {shown}.")
    rows = [(p, cells) for p in PLACEMENTS]
    for folder in post_hoc_dirs:
        lines += _post_hoc(cells, depths, folder)
        found = {key: cell for key, cell in _cells(folder).items() if cell.values(LOSS)}
        rows += [(f"{p}, post hoc ({folder.name})", cells | found) for p in PLACEMENTS if (p, depths[0]) in found]
    return lines + ["", *_table(rows, depths)]


def _table(rows: list[tuple[str, dict[tuple[str, str], CellResult]]], depths: list[str]) -> list[str]:
    """Each placement's test loss (mean ± std over seeds), its difference from Pre-LN paired by seed, its mean
    residual growth and its chosen learning rate, at each depth; a post hoc row is labelled with its folder."""
    header = "| placement | " + " | ".join(f"{d} {LOSS} | Δ vs pre | growth | lr" for d in depths) + " |"
    lines = [header, "|---" * (1 + 4 * len(depths)) + "|"]
    for label, cells in rows:
        placement = label.split(",")[0]
        shown = []
        for d in depths:
            cell = cells[placement, d]
            growth = list(cell.values(GROWTH).values())
            delta = "" if placement == "pre" else f"{_against_pre(cells, placement, d, LOSS).diff:+.3f}"
            lr = next(float(r["model.optim.lr"]) for r in cell.rows if r["status"] == "done")
            loss = mean_std(list(cell.values(LOSS).values()))
            shown.append(f"{loss} | {delta} | {sum(growth) / len(growth):+.2f} | {lr:g}")
        lines.append(f"| {label} | " + " | ".join(shown) + " |")
    return lines


def _post_hoc(cells: dict[tuple[str, str], CellResult], depths: list[str], folder: Path) -> list[str]:
    """A post hoc folder's placements stand in for the pre-registered cells of the same name: the claims again
    where it re-ran Peri-LN, the comparison with Pre-LN for another placement, and each against its
    pre-registered self, all paired by seed."""
    found = _cells(folder)
    placements = sorted({p for p, _ in found}, key=PLACEMENTS.index)
    replaced = {key: cell for key, cell in found.items() if cell.values(LOSS)}
    label = f"Post hoc ({folder.name}): "
    if not placements or len(replaced) < len(placements) * len(depths):
        return [f"- {label.lower()}its final runs have not ended: no verdict yet"]
    merged = cells | replaced
    lines = _claims(merged, depths, label) if "peri" in placements else []
    for placement in placements:
        if placement != "peri":
            shown = _at(depths, (_interval(_against_pre(merged, placement, d, LOSS)) for d in depths))
            lines.append(f"- {label}{placement} − Pre on {LOSS}: {shown}.")
        changed = (paired_difference(replaced[placement, d].values(LOSS), cells[placement, d].values(LOSS))
                   for d in depths)  # fmt: skip
        shown = _at(depths, map(_interval, changed))
        lines.append(f"- {label}its {placement} − the pre-registered one on {LOSS}, paired by seed: {shown}.")
    return lines


def _against_pre(cells: dict[tuple[str, str], CellResult], placement: str, depth: str, column: str) -> Comparison:
    return paired_difference(cells[placement, depth].values(column), cells["pre", depth].values(column))


def main(argv: list[str] | None = None) -> int:
    return table_script.run_lines(argv, __doc__, verdicts, "verdict.md", post_hoc=True)


if __name__ == "__main__":
    raise SystemExit(main())
