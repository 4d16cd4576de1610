"""Did the cells compared run the same code? Each run's git commit, grouped by cell, and each plugin's SHA-256
(`run.json`'s `plugins`: a variant from outside the suite), with a warning when they differ across runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from contract.git import UNKNOWN
from contract.run_folder import FINISHED
from contract.run_record import RunRecordError, read_run_record
from experiments.analysis.comparison import Analysis


@dataclass(frozen=True)
class CodeCheck:
    """Args:
    lines: the report's Markdown lines naming each cell's commits (empty without runs).
    warning: why the comparison may mix code (several commits, dirty trees, no commit), or None.
    """

    lines: list[str]
    warning: str | None


def check_code(out_dir: Path, analysis: Analysis) -> CodeCheck:
    """Each run's code: the ledger's `git_commit`, else (ledgers older than that column) its own run.json."""
    code: dict[str, list[str]] = {}
    plugins: dict[str, list[str]] = {}  # a plugin's file -> its SHA-256 in each run that imported it
    for cell in analysis.cells:
        for row in (r for r in cell.rows if r["status"] in FINISHED):  # a failed run compares nothing
            run_dir = out_dir / cell.name / f"seed{row['seed']}"
            try:
                record = read_run_record(run_dir)
            except RunRecordError:
                record = None
            commit = row.get("git_commit") or getattr(record, "git_commit", None)
            code.setdefault(cell.name, []).append(str(commit or UNKNOWN))
            for plugin in getattr(record, "plugins", None) or ():
                plugins.setdefault(plugin.path, []).append(plugin.sha256)
    runs = [commit for commits in code.values() for commit in commits]
    if not runs:
        return CodeCheck([], None)
    shown = {commit: commit[:12] + ("-dirty" if commit.endswith("-dirty") else "") for commit in runs}
    if len(set(runs)) == 1:
        lines = [f"- code: every run at git commit `{shown[runs[0]]}`"]
    else:
        lines = ["- code: each cell's runs by git commit"]
        for cell, commits in code.items():
            counts = ", ".join(f"`{shown[c]}` ×{commits.count(c)}" for c in dict.fromkeys(commits))
            lines.append(f"  - `{cell}`: {counts}")
    problems = []
    for path, hashes in plugins.items():
        versions = ", ".join(f"`{h[:12]}` ×{hashes.count(h)}" for h in dict.fromkeys(hashes))
        lines.append(f"- plugin `{path}`: sha256 {versions}")
        if len(set(hashes)) > 1:
            problems.append(f"plugin {path} in {len(set(hashes))} versions (sha256 {versions}): it was edited")
    distinct = sorted({c.removesuffix("-dirty") for c in runs if c != UNKNOWN})
    if len(distinct) > 1:
        problems.append(f"{len(distinct)} commits ({', '.join(f'`{c[:12]}`' for c in distinct)})")
    dirty = sum(c.endswith("-dirty") for c in runs)
    if dirty:
        patch = "uncommitted changes; a sweep keeps their patch in the run's `git.diff`"
        problems.append(f"{dirty} of {len(runs)} runs from a dirty tree ({patch})")
    if UNKNOWN in runs:
        problems.append(f"{runs.count(UNKNOWN)} of {len(runs)} runs with no recorded commit")
    warning = None
    if problems:
        warning = (
            f"the runs compared may not have run the same code: {'; '.join(problems)}. Part of a difference may "
            "be a change of code; re-run them from one clean commit (a spec's `require_clean: true` ensures it)."
        )
    return CodeCheck(lines, warning)
