"""A spec's `plugins:` (every run's `--plugins`) and `require_clean: true`, which also requires each plugin to be
committed unchanged in the git repository holding it (a temporary one: the suite's own stays untouched)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from contract.git import file_commit
from experiments.sweep.provenance import check_plugins_clean
from experiments.sweep.spec import SpecError, load_spec
from experiments.sweep.validate import cell_args


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)  # fmt: skip


def test_a_spec_plugins_key_is_every_runs_plugins_flag(tmp_path, tiny_spec):
    spec = load_spec(
        tiny_spec(tmp_path / "s.yaml", plugins="examples/my_norm.py", grid={"model.arch.norm": ["rmsnorm"]})
    )
    assert spec.fixed["plugins"] == ["examples/my_norm.py"]
    assert '--plugins=["examples/my_norm.py"]' in cell_args(spec, spec.cells[0])
    both = tiny_spec(tmp_path / "both.yaml", {"plugins": ["a.py"]}, plugins=["b.py"], grid={"model.arch.norm": ["dyt"]})
    with pytest.raises(SpecError, match="plugins: is also in fixed"):
        load_spec(both)
    with pytest.raises(SpecError, match="plugins: needs a module path or a list of them, got 3"):
        load_spec(tiny_spec(tmp_path / "bad.yaml", plugins=3, grid={"model.arch.norm": ["dyt"]}))


def test_require_clean_requires_each_plugin_committed_unchanged_in_its_repository(tmp_path, tiny_spec):
    repo = tmp_path / "ideas"
    repo.mkdir()
    plugin = repo / "norms.py"
    plugin.write_text("X = 1\n")
    spec = load_spec(tiny_spec(tmp_path / "s.yaml", plugins=[str(plugin)], require_clean=True,
                               grid={"model.arch.norm": ["dyt"]}))  # fmt: skip
    with pytest.raises(SpecError, match=f"plugin {plugin} .* is in no git repository"):
        check_plugins_clean(spec)
    git(repo, "init", "-q")
    git(repo, "commit", "-q", "--allow-empty", "-m", "start")
    with pytest.raises(SpecError, match="is not committed unchanged in its repository"):  # untracked
        check_plugins_clean(spec)
    git(repo, "add", "norms.py")
    git(repo, "commit", "-q", "-m", "norms")
    check_plugins_clean(spec)
    assert file_commit(plugin) is not None and not file_commit(plugin).endswith("-dirty")
    plugin.write_text("X = 2\n")
    assert file_commit(plugin).endswith("-dirty")
    with pytest.raises(SpecError, match="is not committed unchanged in its repository"):
        check_plugins_clean(spec)
