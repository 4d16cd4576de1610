"""What a benchmark section returns, and the markdown / JSON it becomes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Target:
    """A target from the issue, checked on a ratio (or fraction) measured in the same run."""

    name: str
    value: float | None  # None: could not be measured (the detail says why)
    threshold: float
    higher_is_better: bool = True
    detail: str = ""

    @property
    def passed(self) -> bool | None:
        if self.value is None or (isinstance(self.value, float) and math.isnan(self.value)):
            return None
        return self.value >= self.threshold if self.higher_is_better else self.value <= self.threshold

    @property
    def verdict(self) -> str:
        return {True: "PASS", False: "FAIL", None: "n/a"}[self.passed]

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "value": self.value,
            "threshold": self.threshold,
            "higher_is_better": self.higher_is_better,
            "verdict": self.verdict,
            "detail": self.detail,
        }


@dataclass
class Table:
    header: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    title: str = ""

    def add(self, *cells: Any) -> None:
        self.rows.append(list(cells))

    def markdown(self) -> str:
        lines = [f"**{self.title}**", ""] if self.title else []
        lines.append("| " + " | ".join(self.header) + " |")
        lines.append("|" + "|".join("---" for _ in self.header) + "|")
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in self.rows]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"title": self.title, "header": self.header, "rows": [[_cell(c) for c in r] for r in self.rows]}


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


@dataclass
class Section:
    key: str
    title: str
    tables: list[Table] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)  # raw numbers for the JSON copy
    seconds: float = 0.0
    error: str | None = None

    def markdown(self) -> str:
        parts = [f"## {self.title}", f"_section `{self.key}`, {self.seconds:.0f} s_"]
        if self.error:
            parts.append(f"**ERROR** — the section did not finish:\n\n```\n{self.error}\n```")
        parts += [t.markdown() for t in self.tables]
        if self.targets:
            parts.append(targets_table(self.targets).markdown())
        parts += [f"- {note}" for note in self.notes] if self.notes else []
        return "\n\n".join(parts)

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "title": self.title,
            "seconds": self.seconds,
            "error": self.error,
            "tables": [t.to_json() for t in self.tables],
            "targets": [t.to_json() for t in self.targets],
            "notes": self.notes,
            "data": self.data,
        }


def targets_table(targets: list[Target], title: str = "") -> Table:
    table = Table(["target", "measured", "threshold", "result", "detail"], title=title)
    for t in targets:
        value = "—" if t.value is None else f"{t.value:.3g}"
        table.add(t.name, value, f"{'≥' if t.higher_is_better else '≤'} {t.threshold:g}", t.verdict, t.detail)
    return table
