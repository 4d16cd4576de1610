"""A spec's `plugins:` (every run's `--plugins`) and `require_clean: true`, which also requires each plugin to be
committed unchanged in the git repository holding it (a temporary one: the suite's own stays untouched)."""

from __future__ import annotations

import subprocess
import sys
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


def test_a_tuned_ladder_sweeps_a_plugin_variant(tmp_path):
    """Tuning and ladders take a plugin's variant like a built-in one: every cell of a tuned ladder validates
    through the suite's CLI (the plugin imported first) and each run's command carries the plugin."""
    root = Path(__file__).resolve().parents[3]
    spec = tmp_path / "tuned_ladder.yaml"
    spec.write_text(
        "plugins: [examples/my_norm.py]\n"
        "base: [configs/gpt/base.yaml, configs/gpt/tiny.yaml]\n"
        "fixed: {data.eval_lengths: [64], data.test_split: held_out}\n"
        "grid: {model.arch.norm: [rmsnorm, scaled_rmsnorm]}\n"
        "ladder: [{name: d32, model.arch.d_model: 32}, {name: d64, model.arch.d_model: 64}]\n"
        "tune: {grid: {model.optim.lr: [1.0e-3, 2.0e-3]}, transfer: {from: d32}}\n"
    )
    done = subprocess.run([sys.executable, "cli.py", "sweep", str(spec), "--out", str(tmp_path / "out"), "--dry-run"],
                          cwd=root, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    commands = [line for line in done.stdout.splitlines() if "cli.py fit" in line]
    assert commands and all("--plugins" in c for c in commands)
    assert any("--model.arch.norm=scaled_rmsnorm" in c and "size=d32~lr=" in c for c in commands)
