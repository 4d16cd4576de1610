"""The Peri-LN study's verdict, derived from its ledger by the rule its spec states before any run
(`peri_ln.yaml`): loss, residual growth with depth and loss spikes, Peri-LN against Pre-LN at each depth (Post-LN
and the reordered norm beside them), as Markdown for the README.

    python -m experiments.studies.peri_ln.verdict experiments/studies/peri_ln/results/peri_ln [POST_HOC_DIR ...]
"""

from __future__ import annotations

from pathlib import Path

from experiments.analysis import decisions as rules
from experiments.analysis.comparison import CellResult
from experiments.analysis.decisions import interval as _interval
from experiments.analysis.stats import Comparison, paired_difference
from experiments.analysis.sweep_results import load
from experiments.records.ledger import SEARCH_MARK
from experiments.studies import table_script
from experiments.studies.table_script import mean_std

LOSS, GROWTH, SPIKES = "test/loss", "diagnostics/residual_growth", "loss_spikes"
PLACEMENTS = ("pre", "peri", "post", "reordered")


def cell_key(name: str) -> tuple[str, str]:
    """`norm_placement=peri,size=L8` -> ("peri", "L8")."""
    parts = dict(part.split("=", 1) for part in name.split(SEARCH_MARK)[0].split(","))
    return parts["norm_placement"], parts["size"]


Cells = dict[tuple[str, str], CellResult]
Unbracketed = dict[tuple[str, str], list[str]]  # (placement, depth) -> the tuned keys left at a grid's edge


def _cells(sweep_dir: Path) -> tuple[Cells, Unbracketed]:
    sweep = load(sweep_dir)
    return sweep.keyed(cell_key), {cell_key(name): keys for name, keys in sweep.unbracketed().items()}


def _guard(unbracketed: Unbracketed, placement: str, depth: str) -> rules.Guard | None:
    """The bracketing guard of `placement` − Pre at `depth` (cells named `placement@depth`)."""
    cells = (f"{placement}@{depth}", f"pre@{depth}")
    return rules.bracketing({f"{p}@{d}": keys for (p, d), keys in unbracketed.items()}, cells)


def _flag(guard: rules.Guard | None) -> str:
    """A comparison outside the claims that touches an unbracketed cell says so."""
    return f" ({guard.reason})" if guard else ""


def _claims(cells: Cells, unbracketed: Unbracketed, depths: list[str], label: str = "") -> list[str]:
    """The three pre-registered claims, Peri-LN against Pre-LN at each depth, by the spec's rule; a depth whose
    Pre-LN or Peri-LN search left an end open is inconclusive by the bracketing rule."""
    guards = [_guard(unbracketed, "peri", d) for d in depths]
    loss = [_against_pre(cells, "peri", d, LOSS) for d in depths]
    growth = [_against_pre(cells, "peri", d, GROWTH) for d in depths]

    # the spec: each claim is inconclusive by the bracketing rule when any cell it compares is unbracketed, so the
    # guards apply to the claim, not depth by depth (a clean depth's "not reproduced" does not override them)
    def below(comparisons: list[Comparison]) -> rules.Verdict:
        return rules.decide(rules.combine([rules.direction(c, "below") for c in comparisons]), *guards)

    spikes = {(p, d): int(sum(cells[p, d].values(SPIKES).values())) for p in ("pre", "peri") for d in depths}
    by_depth = rules.combine([_spikes_more(spikes["pre", d], spikes["peri", d], d) for d in depths])
    spike = (rules.decide(by_depth, *guards) if any(spikes.values())
             else rules.Verdict(rules.INCONCLUSIVE, "no final run spiked"))  # fmt: skip
    counted = [f"{spikes['pre', d]} against {spikes['peri', d]}" for d in depths]
    beats, flat = below(loss), below(growth)
    return [
        f"- **{label}Peri-LN beats Pre-LN: {beats}.**{rules.why(beats)} Peri − Pre on {LOSS}, paired by seed, each "
        f"at its tuned lr: {_at(depths, map(_interval, loss))}.",
        f"- **{label}Peri-LN keeps the residual stream from growing with depth: {flat}.**{rules.why(flat)} Growth = "
        f"ln(RMS after the last block / after the first) at the last probe; Peri − Pre: "
        f"{_at(depths, map(_interval, growth))}.",
        f"- **{label}Pre-LN spikes more: {spike}.**{rules.why(spike)} Loss spikes over the final runs (z > 6 over 50 "
        f"steps), Pre against Peri: {_at(depths, counted)}.",
    ]


def _spikes_more(pre: int, peri: int, depth: str) -> rules.Verdict:
    """The claim "Pre-LN spikes more" at one depth: a count, no test; a depth where neither placement spiked
    tells nothing."""
    if not pre and not peri:
        return rules.Verdict(rules.INCONCLUSIVE, f"no final run spiked at {depth}")
    return rules.holds(pre > peri, f"more spikes in Pre-LN at {depth}")


def _at(depths: list[str], values) -> str:
    return "; ".join(f"{d}: {v}" for d, v in zip(depths, values))


def verdicts(sweep_dir: Path, *post_hoc_dirs: Path) -> list[str]:
    """One Markdown bullet per pre-registered claim, then the other placements against Pre-LN; then the claims
    again for each post hoc folder, its cells standing in for the pre-registered ones of the same name (paired
    by seed with the rest)."""
    cells, unbracketed = _cells(sweep_dir)
    depths = sorted({depth for _, depth in cells}, key=lambda d: int(d.lstrip("L")))
    missing = [(p, d) for d in depths for p in PLACEMENTS if (p, d) not in cells or not cells[p, d].values(LOSS)]
    if not depths or missing:
        return [f"- the final runs of {len(missing)} cell(s) have not ended: no verdict yet"]
    lines = _claims(cells, unbracketed, depths)
    for placement in ("post", "reordered"):  # beside the verdicts, by the same comparisons
        shown = _at(depths, (f"{LOSS} {_interval(_against_pre(cells, placement, d, LOSS))}; growth "
                             f"{_interval(_against_pre(cells, placement, d, GROWTH))}"
                             f"{_flag(_guard(unbracketed, placement, d))}" for d in depths))  # fmt: skip
        lines.append(f"- {placement} − Pre (not a pre-registered claim): {shown}.")
    rows = [(p, cells) for p in PLACEMENTS]
    for folder in post_hoc_dirs:
        lines += _post_hoc(cells, unbracketed, depths, folder)
        found = {key: cell for key, cell in _cells(folder)[0].items() if cell.values(LOSS)}
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


def _post_hoc(cells: Cells, unbracketed: Unbracketed, depths: list[str], folder: Path) -> list[str]:
    """A post hoc folder's placements stand in for the pre-registered cells of the same name: the claims again
    where it re-ran Peri-LN, the comparison with Pre-LN for another placement, and each against its
    pre-registered self, all paired by seed."""
    found, found_unbracketed = _cells(folder)
    placements = sorted({p for p, _ in found}, key=PLACEMENTS.index)
    replaced = {key: cell for key, cell in found.items() if cell.values(LOSS)}
    label = f"Post hoc ({folder.name}): "
    if not placements or len(replaced) < len(placements) * len(depths):
        return [f"- {label.lower()}its final runs have not ended: no verdict yet"]
    merged = cells | replaced
    # a stand-in cell carries its own search's bracketing
    merged_unbracketed = {k: v for k, v in unbracketed.items() if k not in replaced} | found_unbracketed
    lines = _claims(merged, merged_unbracketed, depths, label) if "peri" in placements else []
    for placement in placements:
        if placement != "peri":
            shown = _at(depths, (_interval(_against_pre(merged, placement, d, LOSS))
                                 + _flag(_guard(merged_unbracketed, placement, d)) for d in depths))  # fmt: skip
            lines.append(f"- {label}{placement} − Pre on {LOSS}: {shown}.")
        shown = _at(depths, (_interval(paired_difference(replaced[placement, d].values(LOSS),
                                                         cells[placement, d].values(LOSS)))
                             + _flag(_self_guard(unbracketed, found_unbracketed, placement, d))
                             for d in depths))  # fmt: skip
        lines.append(f"- {label}its {placement} − the pre-registered one on {LOSS}, paired by seed: {shown}.")
    return lines


def _self_guard(before: Unbracketed, after: Unbracketed, placement: str, depth: str) -> rules.Guard | None:
    """The bracketing guard of a post hoc cell against its pre-registered self."""
    pairs = (("post hoc", after), ("pre-registered", before))
    edges = {f"{placement}@{depth} ({label})": found.get((placement, depth)) for label, found in pairs}
    return rules.bracketing(edges, edges)


def _against_pre(cells: dict[tuple[str, str], CellResult], placement: str, depth: str, column: str) -> Comparison:
    return paired_difference(cells[placement, depth].values(column), cells["pre", depth].values(column))


def main(argv: list[str] | None = None) -> int:
    return table_script.run_lines(argv, __doc__, verdicts, "verdict.md", post_hoc=True)


if __name__ == "__main__":
    raise SystemExit(main())
