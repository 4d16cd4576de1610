"""Every committed run was made from committed code: each `run.json` under experiments/ (outside
`superseded/` folders) records a `git_commit` that is a commit of this repository, without `-dirty`.
Results made before the sweep enforced this were re-run from clean commits; the old runs are kept in
their folders' `superseded/legacy/`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from contract.run_record import RunRecord

ROOT = Path(__file__).resolve().parents[3]
SHA = re.compile(r"[0-9a-f]{40}")


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "--no-optional-locks", *args], cwd=ROOT, capture_output=True, text=True)


@pytest.fixture(scope="module")
def failing() -> dict[str, list[str]]:
    """run.json (from ROOT) -> why it fails; skips where git cannot tell."""
    try:
        if git("rev-parse", "--git-dir").returncode != 0:
            pytest.skip(f"{ROOT} is not a git checkout: no commits to check the runs against")
    except OSError:
        pytest.skip("git is not installed")
    runs = sorted(p for p in (ROOT / "experiments").rglob("run.json") if "superseded" not in p.parts)
    recorded = {path: RunRecord.from_json(path.read_text(), path).git_commit for path in runs}
    shas = {sha for sha in (c.removesuffix("-dirty") for c in recorded.values()) if SHA.fullmatch(sha)}
    found = {s for s in shas if git("cat-file", "-e", f"{s}^{{commit}}").returncode == 0}
    if shas - found and git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.skip(
            f"a shallow clone: {len(shas - found)} recorded commit(s) are not in its history, which may be only "
            "its depth (git fetch --unshallow to check them)"
        )
    out: dict[str, list[str]] = {}
    for path, commit in recorded.items():
        sha, why = commit.removesuffix("-dirty"), []
        if not SHA.fullmatch(sha):
            why.append(f"git_commit {commit!r} is not a commit")
        elif sha not in found:
            why.append(f"commit {sha[:12]} is not in this repository")
        if commit.endswith("-dirty"):
            why.append("made from a dirty tree")
        if why:
            out[path.relative_to(ROOT).as_posix()] = why
    return out


def test_committed_runs_come_from_clean_commits(failing):
    """A run recording a dirty tree or an unknown commit: re-run it from a clean commit (its spec's
    `require_clean: true` makes the sweep refuse anything else)."""
    shown = [f"  {run}: {', '.join(why)}" for run, why in failing.items()]
    assert not failing, "runs whose code no commit reproduces (re-run them from a clean commit):\n" + "\n".join(shown)
