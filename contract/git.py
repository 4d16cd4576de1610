"""Which code a run ran: the repository's commit, whether the code differs from it, and the patch.

What counts as code (`code_pathspec`) is one rule for a run's `git_commit` and its sweep's dirty check, so
they never disagree: the repository except folders named `results` (what runs wrote: the studies' sweep
folders, the benchmark's figures) and the output folders a caller names (a run's own, its sweep's).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHOWN = 20  # changed files named in a message; the rest are counted
UNKNOWN = "unknown"  # the commit of a run outside a git repository: never a false "clean"


def code_pathspec(root: Path, exclude: Iterable[Path | str | None] = ()) -> list[str]:
    """The git pathspec of what counts as code.

    Args:
        root: the repository.
        exclude: folders of outputs (the run's own, its sweep's); None entries are skipped, and folders
            outside `root` need no excluding (git refuses them; the root itself is code).
    """
    specs = [".", ":(exclude,glob)**/results/**"]
    for folder in exclude:
        try:
            inside = Path(folder).resolve().relative_to(Path(root).resolve()).as_posix()
        except (TypeError, ValueError):  # unset, or outside the repository: nothing to exclude
            continue
        if inside != ".":
            specs.append(f":(exclude){inside}")
    return specs


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
    return subprocess.run(["git", "--no-optional-locks", *args], cwd=repo, capture_output=True, text=True, timeout=60)


def git_state(repo: Path = REPO, exclude: Iterable[Path | str | None] = ()) -> GitState | None:
    """The commit checked out in `repo` and its uncommitted code changes (staged, unstaged, untracked).

    Args:
        repo: the repository's root.
        exclude: folders whose changes are outputs, not code (see `code_pathspec`).

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


def git_commit(repo: Path = REPO, exclude: Iterable[Path | str | None] = ()) -> str:
    """`HEAD`'s commit, with `-dirty` when the code differs from it; `unknown` outside a repository."""
    state = git_state(repo, exclude)
    return state.label if state is not None else UNKNOWN


def git_patch(repo: Path = REPO, exclude: Iterable[Path | str | None] = ()) -> str:
    """`git diff HEAD --binary` of the code: what `git apply` puts back on the commit."""
    return _git(repo, "diff", "HEAD", "--binary", "--", *code_pathspec(repo, exclude)).stdout


def file_commit(path: Path) -> str | None:
    """The commit of the repository that holds the file `path`, with `-dirty` unless the file is committed there
    unchanged (untracked, ignored, staged or modified); None when it is in no git repository with a commit."""
    path = Path(path).resolve()
    try:
        head = _git(path.parent, "rev-parse", "--verify", "HEAD")
        if head.returncode != 0:
            return None
        tracked = _git(path.parent, "ls-files", "--error-unmatch", "--", path.name).returncode == 0
        status = _git(path.parent, "status", "--porcelain", "--", path.name)
    except (OSError, subprocess.SubprocessError):
        return None
    dirty = not tracked or status.returncode != 0 or bool(status.stdout.strip())
    return head.stdout.strip() + ("-dirty" if dirty else "")
