"""Which code a run ran: the git commit of the repository and its uncommitted changes.

A sweep started from a dirty tree says so (naming the changed files), refuses to start when its spec sets
`require_clean: true`, and leaves in each run's folder, at every start or resume, `git.diff`: the patch
(`git diff HEAD`: staged and unstaged changes) on top of the commit, with the untracked files listed in
its comment lines (their contents are not kept). The run's own `run.json` records `git_commit` (`HEAD`,
plus `-dirty` when dirty: `lit_modules.callbacks.git_commit`, the same `code_pathspec`), which the ledger copies.

What runs write is not code: changes inside any folder named `results` (the studies' sweep folders, the
benchmark's figures) and inside the sweep's own folder do not make the tree dirty, so a study re-run into
its committed folder from a clean commit stays clean while its runs add files there.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from experiments.sweep.spec import ROOT
from lit_modules.callbacks import code_pathspec

PATCH_NAME = "git.diff"
SHOWN = 20  # changed files named in a message; the rest are counted


@dataclass(frozen=True)
class GitState:
    """The repository's HEAD and what differs from it.

    Args:
        commit: HEAD's full SHA-1.
        changes: `git status --porcelain` lines (`XY path`; `?? path` for an untracked file), outputs excluded.
    """

    commit: str
    changes: tuple[str, ...]

    @property
    def dirty(self) -> bool:
        return bool(self.changes)

    @property
    def label(self) -> str:
        """What `run.json` and the ledger record: the commit, with `-dirty` when the tree differs from it."""
        return self.commit + ("-dirty" if self.dirty else "")

    @property
    def untracked(self) -> list[str]:
        return [line[3:] for line in self.changes if line.startswith("??")]

    def describe(self, shown: int = SHOWN) -> str:
        """The changed files, one per line (indented), the first `shown` of them."""
        lines = [f"  {line}" for line in self.changes[:shown]]
        if len(self.changes) > shown:
            lines.append(f"  ... and {len(self.changes) - shown} more (git status)")
        return "\n".join(lines)


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    # --no-optional-locks: `git status` would otherwise refresh the index under its lock, and fail the
    # `git add` of someone working in the same tree meanwhile
    return subprocess.run(
        ["git", "--no-optional-locks", *args], cwd=repo, capture_output=True, text=True, timeout=60
    )


def git_state(repo: Path, exclude: Iterable[Path | str | None] = ()) -> GitState | None:
    """The commit checked out in `repo` and its uncommitted changes (staged, unstaged, untracked).

    Args:
        repo: the repository's root (the sweep's is `experiments.sweep.spec.ROOT`).
        exclude: folders whose changes are outputs, not code (the sweep's own folder).

    Returns:
        The state, or None when `repo` is not a git repository with a commit (or git is missing).
    """
    try:
        head = _git(repo, "rev-parse", "--verify", "HEAD")
        if head.returncode != 0:
            return None
        status = _git(repo, "status", "--porcelain", "--untracked-files=all", "--", *code_pathspec(repo, exclude))
    except (OSError, subprocess.SubprocessError):
        return None
    if status.returncode != 0:
        return None
    return GitState(head.stdout.strip(), tuple(line for line in status.stdout.splitlines() if line.strip()))


def git_patch(repo: Path, exclude: Iterable[Path | str | None] = ()) -> str:
    """`git diff HEAD --binary` of the code (`lit_modules.callbacks.code_pathspec`): what `git apply` puts
    back on the commit."""
    return _git(repo, "diff", "HEAD", "--binary", "--", *code_pathspec(repo, exclude)).stdout


def record_attempt(run_dir: Path, sweep_dir: Path, action: str, repo: Path | None = None) -> GitState | None:
    """Leaves the code of a run's attempt in its folder: `git.diff` when the tree is dirty (an earlier
    attempt's patch, when resuming, is kept as `git.<k>.diff`; the folder of a fresh start is empty).

    Args:
        run_dir: the run's folder.
        sweep_dir: the sweep's folder (its changes are outputs).
        action: `start` or `resume`, noted in the patch.
        repo: the repository (default: the suite's, `ROOT`).

    Returns:
        The state the attempt starts from (None outside a git repository).
    """
    repo = repo or ROOT
    state = git_state(repo, [sweep_dir])
    patch = run_dir / PATCH_NAME
    if patch.exists():  # an earlier attempt's: the resumed run is made of both
        earlier = len(list(run_dir.glob("git.*.diff"))) + 1
        patch.rename(run_dir / f"git.{earlier}.diff")
    if state is None or not state.dirty:
        return state
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    head = [
        f"# The uncommitted code this run's attempt ({action}, {stamp}) started from: `git diff HEAD` (staged",
        f"# and unstaged changes) on top of commit {state.commit}; results folders and the sweep's own are left out.",
        f"# Reproduce: git checkout {state.commit} && git apply {PATCH_NAME}   (git apply skips these lines)",
    ]
    if state.untracked:
        head.append("# Untracked files then (not in the patch; their contents are not kept):")
        head += [f"#   {path}" for path in state.untracked]
    tmp = run_dir / f".{PATCH_NAME}.{os.getpid()}.tmp"  # atomic (not lit_modules.files: Lightning, in a job)
    tmp.write_text("\n".join(head) + "\n\n" + git_patch(repo, [sweep_dir]))
    os.replace(tmp, patch)
    return state
