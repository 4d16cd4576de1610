"""A run's attempt leaves the uncommitted code it started from in its folder.

A sweep started from a dirty tree says so (naming the changed files), refuses to start when its spec sets
`require_clean: true`, and leaves in each run's folder, at every start or resume, `git.diff`: the patch
(`git diff HEAD`: staged and unstaged changes) on top of the commit, with the untracked files listed in
its comment lines (their contents are not kept). The run's own `run.json` records `git_commit` (`HEAD`,
plus `-dirty` when dirty), which the ledger copies; both use `contract.git`'s one rule of what is code, so
changes inside `results` folders and the sweep's own folder (outputs) never make the tree dirty.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from contract.errors import ConfigError
from contract.files import write_atomic
from contract.git import REPO, GitState, file_commit, git_patch, git_state
from contract.plugins import plugin_file, plugin_list
from contract.run_folder import PATCH_NAME
from experiments.sweep.spec import Spec, SpecError


def record_attempt(run_dir: Path, sweep_dir: Path, action: str, repo: Path | None = None) -> GitState | None:
    """Leaves the code of a run's attempt in its folder: `git.diff` when the tree is dirty (an earlier
    attempt's patch, when resuming, is kept as `git.<k>.diff`; the folder of a fresh start is empty).

    Args:
        run_dir: the run's folder.
        sweep_dir: the sweep's folder (its changes are outputs).
        action: `start` or `resume`, noted in the patch.
        repo: the repository (default: the suite's).

    Returns:
        The state the attempt starts from (None outside a git repository).
    """
    repo = repo or REPO
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
    write_atomic(patch, "\n".join(head) + "\n\n" + git_patch(repo, [sweep_dir]))
    return state


def check_tree(spec: Spec, out_dir: Path, dry_run: bool) -> None:
    """Says at start which uncommitted changes the runs will carry (each run keeps their patch in its
    `git.diff`; the ledger's `git_commit` ends in `-dirty`), and refuses them when the spec sets
    `require_clean: true` (a dry run runs nothing: it only says so).

    Raises:
        SpecError: `require_clean` and a dirty tree, or no git repository to check; or a plugin (`plugins:`) not
            committed unchanged in its own repository.
    """
    if spec.require_clean and not dry_run:
        check_plugins_clean(spec)
    state = git_state(REPO, [out_dir])
    if state is None:
        if spec.require_clean and not dry_run:
            raise SpecError(f"{spec.path} sets require_clean: true, but {REPO} has no git commit to check (or no git)")
        print(f"warning: {REPO} is not a git repository with a commit: the runs record no commit", file=sys.stderr)
        return
    if not state.dirty:
        return
    files = (
        f"has {len(state.changes)} uncommitted change(s) (git status --porcelain; changes in results folders "
        f"and in the sweep's folder are outputs, not counted):\n{state.describe()}"
    )
    if spec.require_clean and not dry_run:
        raise SpecError(
            f"{spec.path} sets require_clean: true, but the git tree at {REPO} {files}\n"
            "Commit them (git add ... && git commit), then run the sweep again: its runs will record a clean commit."
        )
    refused = "\na real run of this spec refuses to start (require_clean: true)" if spec.require_clean else ""
    print(
        f"warning: the git tree at {REPO} {files}\nthe runs will carry them: each run's folder keeps the patch "
        f"(git.diff), results.csv records git_commit {state.label}; commit them for runs that the "
        f"commit alone reproduces (a spec's require_clean: true enforces it){refused}",
        file=sys.stderr,
    )


def check_plugins_clean(spec: Spec) -> None:
    """`require_clean: true` also holds for the plugins: each committed unchanged in the git repository holding it.

    Raises:
        SpecError: naming the first plugin that is not (missing, outside git, untracked or changed).
    """
    try:
        names = plugin_list(spec.fixed.get("plugins"))
        for name in names:
            path = plugin_file(name)
            commit = file_commit(path) if path is not None else None
            if commit is None or commit.endswith("-dirty"):
                state = "is in no git repository" if commit is None else "is not committed unchanged in its repository"
                raise SpecError(
                    f"{spec.path} sets require_clean: true, but plugin {name} ({path}) {state}; commit it "
                    "(git add ... && git commit in its repository), then run the sweep again"
                )
    except ConfigError as err:
        raise SpecError(str(err)) from None
