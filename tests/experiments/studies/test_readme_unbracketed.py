"""A README's list of unbracketed cells is its ledger's (issue 49, part 5): the cells whose tuned learning rate
the search left open (`CellSearch.unbracketed`: the best at an end of what it tried, or an end still no worse than
its neighbour), where a better value may lie beyond and every comparison touching them is inconclusive by the
bracketing rule. The README of every committed tuned sweep states the list as `Unbracketed in `FOLDER`: `cell`,
...` (or `none`), and the studies index spells the ladders' lists in words; both are recomputed here from the
committed ledgers, beside `test_readme_quotes.py`'s figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.analysis.sweep_results import load

ROOT = Path(__file__).resolve().parents[3]
STUDIES = ROOT / "experiments" / "studies"


def tuned_sweeps() -> dict[str, list[str]]:
    """study -> its committed sweep folders that tuned (`tune:` with a grid)."""
    out: dict[str, list[str]] = {}
    for info in sorted(STUDIES.glob("*/results/*/sweep.json")):
        if (json.loads(info.read_text()).get("tune") or {}).get("grid"):
            out.setdefault(info.parents[2].name, []).append(info.parent.name)
    return out


UNBRACKETED = tuned_sweeps()


def normalized(text: str) -> str:
    """Markdown as it reads: bold markers dropped, every run of whitespace (a wrapped line) one space."""
    return " ".join(text.replace("**", "").split())


def listed(study: str, folder: str) -> str:
    """The README's sentence for one sweep folder, spelled from its ledger."""
    cells = load(STUDIES / study / "results" / folder).unbracketed()
    return f"Unbracketed in `{folder}`: " + (", ".join(f"`{cell}`" for cell in cells) or "none") + "."


@pytest.mark.parametrize("study", sorted(UNBRACKETED))
def test_readme_lists_its_unbracketed_cells(study):
    text = normalized((STUDIES / study / "README.md").read_text())
    missing = [line for folder in UNBRACKETED[study] if normalized(line := listed(study, folder)) not in text]
    assert not missing, f"{study}/README.md does not list its ledger's unbracketed cells as:\n" + "\n".join(missing)


def in_words(study: str, folder: str, axis: str, labels: dict[str, str]) -> str:
    """A ladder's unbracketed cells by scheme: `RoPE at d 64, d 96 and ALiBi at d 64, d 96, d 128`."""
    sizes: dict[str, list[str]] = {}
    for cell in load(STUDIES / study / "results" / folder).unbracketed():
        parts = dict(part.split("=", 1) for part in cell.split(","))
        sizes.setdefault(parts[axis], []).append(parts["size"].replace("d", "d ", 1))
    return " and ".join(f"{labels[k]} at {', '.join(sizes[k])}" for k in labels if k in sizes)


def test_the_index_spells_the_extrapolation_ladders_unbracketed_cells():
    """The index row once omitted ALiBi at d 128; it is the ledger's list now."""
    words = in_words("extrapolation", "extrapolation_ladder", "pos_encoding", {"rope": "RoPE", "alibi": "ALiBi"})
    assert words == "RoPE at d 64, d 96 and ALiBi at d 64, d 96, d 128"
    index = normalized((ROOT / "experiments" / "README.md").read_text())
    assert f"learning rates unbracketed for {words}," in index
