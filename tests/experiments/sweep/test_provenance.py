"""Provenance the sweep enforces, on a temporary git repository (the suite's own stays untouched): the
tree's state and patch, `git.diff` in a run's folder, `git_commit` in the ledger, `require_clean`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from contract.git import GitState, git_commit, git_state
from contract.run_folder import PATCH_NAME, SWEEP_DIR_VAR
from contract.run_record import ProbeHeadlines
from experiments.records.ledger import TAIL, Ledger, collect_row
from experiments.sweep import provenance
from experiments.sweep.provenance import record_attempt
from experiments.sweep.runner import prepare
from experiments.sweep.runs import Run
from experiments.sweep.spec import SpecError, load_spec
from tests.run_records import write_record
from tools import sweep

DIRTY = GitState("0123456789abcdef0123456789abcdef01234567", (" M models/attention.py", "?? scratch.py"))


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path):
    """A repository with one commit: code, and a committed results folder."""
    root = tmp_path / "repo"
    (root / "study" / "results" / "old").mkdir(parents=True)
    (root / "code.py").write_text("x = 1\n")
    (root / "study" / "results" / "old" / "results.csv").write_text("cell,seed\n")
    git(root, "init", "-q")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    return root


def dirty_up(repo: Path) -> None:
    """An unstaged edit, a staged new file and an untracked file."""
    (repo / "code.py").write_text("x = 2\n")
    (repo / "staged.py").write_text("y = 1\n")
    git(repo, "add", "staged.py")
    (repo / "notes.txt").write_text("untracked\n")


def test_git_state_clean_then_dirty(repo):
    head = git(repo, "rev-parse", "HEAD").strip()
    clean = git_state(repo)
    assert clean == GitState(head, ()) and not clean.dirty and clean.label == head
    dirty_up(repo)
    state = git_state(repo)
    assert state.dirty and state.label == f"{head}-dirty"
    assert set(state.changes) == {" M code.py", "A  staged.py", "?? notes.txt"}
    assert state.untracked == ["notes.txt"]
    assert all(name in state.describe() for name in ("code.py", "staged.py", "notes.txt"))
    assert "and 2 more" in state.describe(shown=1)


def test_outputs_are_not_code(repo, tmp_path):
    """Results folders and the sweep's own folder hold outputs: they never make the tree dirty."""
    (repo / "study" / "results" / "old" / "results.csv").write_text("cell,seed\nnew,0\n")  # a tracked ledger, rewritten
    (repo / "study" / "results" / "new" / "a" / "seed0").mkdir(parents=True)
    (repo / "study" / "results" / "new" / "a" / "seed0" / "run.json").write_text("{}")
    (repo / "sweeps" / "mine" / "a").mkdir(parents=True)
    (repo / "sweeps" / "mine" / "a" / "run.json").write_text("{}")
    assert git_state(repo).changes == ("?? sweeps/mine/a/run.json",)
    assert not git_state(repo, [repo / "sweeps" / "mine"]).dirty
    assert not git_state(repo, [repo / "sweeps" / "mine", tmp_path / "elsewhere", None]).dirty  # outside: ignored
    assert git_state(repo, [repo]).dirty  # the root is code too: never excluded whole
    assert git_commit(repo, (repo / "sweeps" / "mine",)) == git_state(repo).commit


def test_a_linked_venv_is_not_code(repo, tmp_path):
    """The project's .gitignore ignores `.venv` whether a folder or a link to a shared one (a clone for a study reuses
    its parent's venv): with `.venv/`, a link showed as untracked, and every run recorded a dirty commit."""
    (repo / ".gitignore").write_text((Path(__file__).resolve().parents[3] / ".gitignore").read_text())
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".gitignore")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "ignore")
    (tmp_path / "venv").mkdir()
    (repo / ".venv").symlink_to(tmp_path / "venv")
    assert not git_state(repo).dirty


def test_no_repository(tmp_path):
    assert git_state(tmp_path) is None
    git(tmp_path, "init", "-q")  # a repository without a commit
    assert git_state(tmp_path) is None
    assert git_commit(tmp_path) == "unknown"


def test_run_metadata_agrees_with_the_sweep(repo):
    """`RunMetadata`'s git_commit (what run.json and so the ledger record) is the sweep's label, state by state."""
    out = repo / "sweeps" / "mine"
    out.mkdir(parents=True)
    (out / "sweep.json").write_text("{}")
    states = []
    output = repo / "study" / "results" / "x.txt"
    for change in (lambda: None, lambda: output.write_text("1"), lambda: dirty_up(repo)):
        change()
        states.append(git_state(repo, [out]).label)
        assert git_commit(repo, (out, None)) == states[-1]
    assert not states[0].endswith("-dirty") and not states[1].endswith("-dirty") and states[2].endswith("-dirty")


def test_record_attempt_keeps_a_patch_that_applies(repo, tmp_path):
    head = git(repo, "rev-parse", "HEAD").strip()
    sweep_dir = repo / "sweeps" / "mine"
    run_dir = sweep_dir / "a" / "seed0"
    run_dir.mkdir(parents=True)
    assert record_attempt(run_dir, sweep_dir, "start", repo=repo).label == head  # clean: no patch
    assert not list(run_dir.glob("git*"))

    dirty_up(repo)
    state = record_attempt(run_dir, sweep_dir, "start", repo=repo)
    patch = (run_dir / PATCH_NAME).read_text()
    assert state.dirty and head in patch and "#   notes.txt" in patch and "sweeps/mine" not in patch
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    git(clone, "apply", str(run_dir / PATCH_NAME))  # the comment lines are skipped
    assert (clone / "code.py").read_text() == "x = 2\n" and (clone / "staged.py").read_text() == "y = 1\n"
    assert not (clone / "notes.txt").exists()  # untracked files are listed, not kept

    (repo / "code.py").write_text("x = 3\n")  # resumed on other code: both patches stay
    record_attempt(run_dir, sweep_dir, "resume", repo=repo)
    assert (run_dir / "git.1.diff").read_text() == patch
    assert "x = 3" in (run_dir / PATCH_NAME).read_text() and "(resume, " in (run_dir / PATCH_NAME).read_text()


def test_prepare_records_each_attempt(repo, monkeypatch):
    """The runner's `prepare` (pool and scheduler jobs alike) leaves the patch; a fresh start clears old ones."""
    monkeypatch.setattr(provenance, "REPO", repo)
    run = Run("a", 0, repo / "sweeps" / "mine" / "a" / "seed0", (), 1)
    assert run.env()[SWEEP_DIR_VAR] == str(repo / "sweeps" / "mine")  # what RunMetadata excludes
    dirty_up(repo)
    prepare(run, "start")
    prepare(run, "resume")
    assert sorted(p.name for p in run.dir.glob("git*")) == ["git.1.diff", PATCH_NAME]
    prepare(run, "start")
    assert sorted(p.name for p in run.dir.glob("git*")) == [PATCH_NAME]


def test_ledger_row_copies_the_runs_commit(tmp_path):
    run_dir = tmp_path / "a" / "seed0"
    run_dir.mkdir(parents=True)
    diagnostics = ProbeHeadlines(step=900, attn_max_logit=7.5, log_z=4.25, residual_growth=-0.5, logit_mean=0.1)
    write_record(run_dir, git_commit=DIRTY.label, loss_spikes=2, diagnostics=diagnostics)
    row = collect_row(run_dir, "a", 0, "done", "", {})
    assert row["git_commit"] == DIRTY.label and row["loss_spikes"] == "2"  # LossSpikes' count, for the report
    # the last probe's headlines (Diagnostics), as columns after the run's statistics
    assert {k: v for k, v in row.items() if k.startswith("diagnostics/")} == {
        "diagnostics/attn_max_logit": "7.5",
        "diagnostics/log_z": "4.25",
        "diagnostics/residual_growth": "-0.5",
    }
    assert collect_row(tmp_path / "never_ran", "b", 0, "failed", "boom", {})["git_commit"] == ""
    ledger = Ledger(tmp_path / "results.csv")
    ledger.put(row)
    assert ledger.columns()[-len(TAIL) :] == ["git_commit", "error"]
    assert ledger.columns().index("flops_per_token") + 1 == ledger.columns().index("diagnostics/attn_max_logit")
    assert Ledger(tmp_path / "results.csv").get("a", 0)["git_commit"] == DIRTY.label


def test_require_clean_is_a_bool_kept_only_when_set(tmp_path, tiny_spec):
    grid = {"model.arch.pos_encoding": ["learned", "alibi"]}
    assert "require_clean" not in load_spec(tiny_spec(tmp_path / "a.yaml", grid=grid)).snapshot()
    assert "require_clean" not in load_spec(tiny_spec(tmp_path / "b.yaml", grid=grid, require_clean=False)).snapshot()
    spec = load_spec(tiny_spec(tmp_path / "c.yaml", grid=grid, require_clean=True))
    assert spec.require_clean and spec.snapshot()["require_clean"] is True
    with pytest.raises(SpecError, match="require_clean: needs true or false"):
        load_spec(tiny_spec(tmp_path / "d.yaml", grid=grid, require_clean="yes"))


@pytest.fixture
def dirty_tree(monkeypatch):
    """The suite's tree as the sweep sees it: dirty (its real state is left alone)."""
    seen = []

    def fake(repo, exclude=()):
        seen.append((repo, list(exclude)))
        return DIRTY

    monkeypatch.setattr(provenance, "git_state", fake)
    return seen


def test_require_clean_refuses_a_dirty_tree(tmp_path, tiny_spec, dirty_tree, capsys):
    spec = tiny_spec(tmp_path / "spec.yaml", grid={"model.arch.pos_encoding": ["learned"]}, require_clean=True)
    out = tmp_path / "out"
    assert sweep.main([str(spec), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "require_clean: true" in err and " M models/attention.py" in err and "?? scratch.py" in err
    assert "Commit them" in err
    assert not out.exists()  # refused before anything was written, let alone run
    assert dirty_tree[0][1] == [out.resolve()]  # the sweep's own folder is output, not code

    assert sweep.main([str(spec), "--out", str(out), "--dry-run"]) == 0  # a dry run runs nothing: it only says so
    assert "refuses to start (require_clean: true)" in capsys.readouterr().err


def test_dirty_tree_is_named_at_start(tmp_path, tiny_spec, dirty_tree, capsys):
    spec = tiny_spec(tmp_path / "spec.yaml", grid={"model.arch.pos_encoding": ["learned"]})
    assert sweep.main([str(spec), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: the git tree") and " M models/attention.py" in err and DIRTY.label in err
    assert "git.diff" in err and "refuses" not in err
