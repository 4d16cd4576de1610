"""Every committed run was made from committed code: each `run.json` under experiments/ (outside
`superseded/` folders) records a `git_commit` that is a commit of this repository, without `-dirty`.

Results made before the sweep enforced this are listed in experiments/studies/LEGACY_PROVENANCE.txt;
the list only shrinks: a listed folder whose runs all pass (re-run from a clean commit) must leave it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ALLOWLIST = ROOT / "experiments" / "studies" / "LEGACY_PROVENANCE.txt"
SHA = re.compile(r"[0-9a-f]{40}")


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "--no-optional-locks", *args], cwd=ROOT, capture_output=True, text=True)


def results_folder(run_json: Path) -> str:
    """The sweep folder of a run (the nearest folder above it with `sweep.json` or `results.csv`), from ROOT."""
    for folder in run_json.parents[1:]:
        if folder == ROOT:
            break
        if (folder / "sweep.json").exists() or (folder / "results.csv").exists():
            return folder.relative_to(ROOT).as_posix()
    return run_json.parent.relative_to(ROOT).as_posix()


def listed() -> list[str]:
    lines = (line.strip() for line in ALLOWLIST.read_text().splitlines())
    return [line.rstrip("/") for line in lines if line and not line.startswith("#")]


@pytest.fixture(scope="module")
def failing() -> dict[str, dict[str, list[str]]]:
    """results folder -> run.json (from ROOT) -> why it fails; skips where git cannot tell."""
    try:
        if git("rev-parse", "--git-dir").returncode != 0:
            pytest.skip(f"{ROOT} is not a git checkout: no commits to check the runs against")
    except OSError:
        pytest.skip("git is not installed")
    runs = sorted(p for p in (ROOT / "experiments").rglob("run.json") if "superseded" not in p.parts)
    recorded = {}
    for path in runs:
        try:
            recorded[path] = str(json.loads(path.read_text()).get("git_commit") or "")
        except ValueError:
            recorded[path] = ""
    shas = {sha for sha in (c.removesuffix("-dirty") for c in recorded.values()) if SHA.fullmatch(sha)}
    found = {s for s in shas if git("cat-file", "-e", f"{s}^{{commit}}").returncode == 0}
    if shas - found and git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.skip(
            f"a shallow clone: {len(shas - found)} recorded commit(s) are not in its history, which may be only "
            "its depth (git fetch --unshallow to check them)"
        )
    out: dict[str, dict[str, list[str]]] = {}
    for path, commit in recorded.items():
        sha, why = commit.removesuffix("-dirty"), []
        if not SHA.fullmatch(sha):
            why.append(f"git_commit {commit!r} is not a commit")
        elif sha not in found:
            why.append(f"commit {sha[:12]} is not in this repository")
        if commit.endswith("-dirty"):
            why.append("made from a dirty tree")
        if why:
            out.setdefault(results_folder(path), {})[path.relative_to(ROOT).as_posix()] = why
    return out


def test_allowlist_is_tidy():
    folders = listed()
    assert folders, f"{ALLOWLIST} lists no folder: delete it (and this test's use of it)"
    assert len(set(folders)) == len(folders), "a folder is listed twice"


def test_committed_runs_come_from_clean_commits(failing):
    """A run outside the listed folders recording a dirty tree or an unknown commit: re-run it from a
    clean commit (its spec's `require_clean: true` makes the sweep refuse anything else)."""
    outside = {folder: runs for folder, runs in failing.items() if folder not in listed()}
    shown = [f"  {run}: {', '.join(why)}" for runs in outside.values() for run, why in runs.items()]
    assert not outside, (
        "runs whose code no commit reproduces (re-run them from a clean commit; do not list them in "
        f"{ALLOWLIST.name}):\n" + "\n".join(shown)
    )


def test_legacy_list_only_shrinks(failing):
    """A listed folder whose runs all come from clean commits now (or that is gone) leaves the list."""
    stale = [folder for folder in listed() if folder not in failing]
    assert not stale, f"remove from experiments/studies/{ALLOWLIST.name} (no failing run left): {stale}"
