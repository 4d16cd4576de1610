"""What the README-figure tests share (`test_readme_quotes`, `readme_positional_figures`,
`test_readme_script_outputs`): where a study's committed ledgers are, markdown as it reads, and how a
README spells a p-value."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
STUDIES = ROOT / "experiments" / "studies"


def results(study: str, spec: str) -> Path:
    return STUDIES / study / "results" / spec


def normalized(text: str) -> str:
    """Markdown as it reads: bold markers dropped, every run of whitespace (a wrapped line) one space."""
    return " ".join(text.replace("**", "").split())


def below(p: float, bound: float = 0.001) -> str:
    """`p < 0.001` where the README says so, and the p-value itself (which then fails) where it is not."""
    return f"p < {bound:g}" if p < bound else f"p = {p:.2g}"


def scientific(p: float) -> str:
    """`9e-6`: one significant digit."""
    mantissa, exponent = f"{p:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"
