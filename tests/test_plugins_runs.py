"""A variant from outside the suite (`examples/my_norm.py`) runs like a built-in one: in `cli.py fit`, on two
processes (each imports it: the same losses as one), resumed from the run's own config.yaml (which names it), and
in the worked example's sweep, where every run records the plugin's SHA-256 and an edit between two runs of one
sweep is reported by the report's code check. A bad plugin is one line before any training."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from contract.plugins import plugin_source
from contract.run_record import read_run_record
from experiments.records.events import read_scalars
from tests.conftest import FIXED
from tests.test_ddp import fit, fit_command
from tools import report

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "my_norm.py"
MY_NORM = ["--plugins=examples/my_norm.py", "--model.arch.norm=scaled_rmsnorm"]


def example_recorded(run: Path) -> bool:
    """The run's record names the example plugin at its current content (its commit may move while tests run)."""
    (plugin,) = read_run_record(run).plugins
    return (plugin.path, plugin.sha256) == (str(EXAMPLE), plugin_source(EXAMPLE).sha256)


def test_a_bad_plugin_is_one_line_before_anything_is_built(tmp_path):
    sources = {
        "missing.py": None,
        "failing.py": "import not_a_module_anywhere\n",
        "taken.py": "from torch import nn\nfrom models.norms import register_norm\n"
        "register_norm('layernorm')(lambda dim, cfg: nn.LayerNorm(dim))\n",
        "wrong.py": "from torch import nn\nfrom models.norms import register_norm\n"
        "register_norm('narrow')(lambda dim, cfg: nn.Linear(dim, 1))\n",
    }
    said = {
        "missing.py": "no such file",
        "failing.py": "fails to import: ModuleNotFoundError: No module named 'not_a_module_anywhere'",
        "taken.py": "norm='layernorm' is taken by the suite (built in); register the variant under another name",
        "wrong.py": "norm 'narrow': must return a tensor of its input's shape (2, 3, 8), got shape (2, 3, 1)",
    }
    for name, source in sources.items():
        if source is not None:
            (tmp_path / name).write_text(source)
        command = fit_command("gpt", 1, tmp_path / "runs", f"--plugins={tmp_path / name}")
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, done.stderr[-2000:]
        assert lines[-1] == f"error: plugins: {tmp_path / name}{'' if name == 'failing.py' else ':'} {said[name]}"
        assert not (tmp_path / "runs").exists()  # nothing built, nothing logged


@pytest.fixture(scope="module")
def plugin_runs(tmp_path_factory):
    """The tiny GPT with the example's norm on one process and on two."""
    root = tmp_path_factory.mktemp("plugin_runs")
    return {n: fit("gpt", n, root / f"p{n}", *MY_NORM) for n in (1, 2)}


def test_two_processes_with_the_plugin_train_like_one_and_record_it(plugin_runs):
    one, two = (read_scalars(plugin_runs[n]).curves["train/loss"] for n in (1, 2))
    assert sorted(one) == sorted(two) and len(one) > 10
    for step, value in one.items():
        assert two[step] == pytest.approx(value, rel=1e-4), f"train/loss at step {step}"
    for run in plugin_runs.values():
        record = read_run_record(run)
        assert record.status == "done" and example_recorded(run)
        assert yaml.safe_load((run / "config.yaml").read_text())["plugins"] == "examples/my_norm.py"
    # the variant took effect: its learned scalar gains are parameters the built-in RMSNorm lacks (2 per block, final)
    assert read_run_record(plugin_runs[1]).params == read_run_record(fit_rmsnorm(plugin_runs[1].parents[2])).params + 3


def fit_rmsnorm(root: Path) -> Path:
    return fit("gpt", 1, root / "rmsnorm", "--model.arch.norm=rmsnorm")


def test_a_run_with_the_plugin_killed_mid_run_resumes_from_its_config_to_the_same_end(tmp_path, plugin_runs):
    checkpoints = tmp_path / "checkpoints"
    command = fit_command("gpt", 1, tmp_path, *MY_NORM,
                          "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
                          "--trainer.callbacks.every_n_train_steps=8", "--trainer.callbacks.save_last=true",
                          f"--trainer.callbacks.dirpath={checkpoints}")  # fmt: skip
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 240
    while not (checkpoints / "last.ckpt").exists():
        assert first.poll() is None and time.monotonic() < deadline, "no checkpoint"
        time.sleep(0.01)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    time.sleep(0.2)
    run = tmp_path / "lightning_logs" / "run"
    assert read_run_record(run).status == "running", "finished before the kill"
    # the run's own config names the plugin: resuming from it alone imports the plugin again
    config = tmp_path / "resume.yaml"
    shutil.copy(run / "config.yaml", config)
    resume = [sys.executable, "cli.py", "fit", "-c", str(config), f"--ckpt_path={checkpoints / 'last.ckpt'}"]
    resumed = subprocess.run(resume, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    whole, again = read_scalars(plugin_runs[1]).curves["train/loss"], read_scalars(run).curves["train/loss"]
    assert sorted(again) == sorted(whole)
    for step, value in whole.items():
        assert again[step] == pytest.approx(value, rel=1e-5), f"train/loss at step {step}"
    assert example_recorded(run)


def run_sweep(spec: Path, out: Path) -> None:
    """`cli.py sweep` in its own process, as a user runs it (in-process, a parser another test built before the
    plugin registered would be reused)."""
    done = subprocess.run([sys.executable, "cli.py", "sweep", str(spec), "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_the_worked_example_sweeps_and_the_code_check_reports_an_edited_plugin(tmp_path):
    """The example's spec, at the tests' tiny size; then the plugin edited and one more seed run into the same sweep."""
    plugin = tmp_path / "my_norm.py"
    shutil.copy(EXAMPLE, plugin)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"extends": str(ROOT / "examples" / "my_norm_sweep.yaml"), "plugins": [str(plugin)],
                                    "fixed": FIXED, "checkpoint_every": 4, "seeds": [0]}))  # fmt: skip
    out = tmp_path / "sweep"
    run_sweep(spec, out)
    cells = ["norm=layernorm", "norm=rmsnorm", "norm=scaled_rmsnorm"]
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("norm=")) == cells
    first = plugin_source(plugin)
    for cell in cells:
        record = read_run_record(out / cell / "seed0")
        assert record.status == "done" and record.plugins == (first,)
    assert report.main([str(out)]) == 0
    text = (out / "report.md").read_text()
    assert f"plugin `{plugin}`: sha256 `{first.sha256[:12]}` ×3" in text and "it was edited" not in text

    plugin.write_text(plugin.read_text().replace("torch.ones(1)", "torch.full((1,), 1.5)"))
    spec.write_text(spec.read_text().replace("- 0\n", "- 0\n- 1\n"))
    run_sweep(spec, out)
    edited = plugin_source(plugin)
    assert read_run_record(out / "norm=layernorm" / "seed1").plugins == (edited,) != (first,)
    assert report.main([str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "in 2 versions" in text and "it was edited" in text and edited.sha256[:12] in text
