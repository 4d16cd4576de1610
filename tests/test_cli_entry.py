"""What `cli.py` sets for the whole process before anything else runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from contract.run_folder import PROGRESS_LINES, PROGRESS_VAR, SWEEP_DIR_VAR

ROOT = Path(__file__).resolve().parent.parent

CHECK = """
import torch
torch.set_num_threads(2)
import cli  # noqa: F401  (the entry point's module-level settings)
x = torch.full((1 << 22,), 1e-39)  # denormal; large enough to be split over the pool's threads
print(int((x * 1.0 != 0).sum()), torch.get_num_threads())
"""


def test_denormals_are_flushed_on_every_thread_of_the_pool():
    """ALiBi's distant keys underflow into denormals, a slow path on x86 CPUs: the entry point flushes them
    before Lightning's imports start the thread pool, so the pool's threads flush too (not just the main one)."""
    out = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, check=True)
    nonzero, threads = map(int, out.stdout.split())
    assert threads == 2 and nonzero == 0


TINY_RUN = [
    "-c", "configs/gpt/base.yaml", "-c", "configs/gpt/tiny.yaml", "--model.arch.d_model=32", "--model.arch.n_layers=1",
    "--data.seq_len=16", "--data.batch_size=8", "--data.val_tokens=256", "--trainer.max_steps=4",
    "--trainer.val_check_interval=2", "--model.sample_tokens=0",
]  # fmt: skip


def _fit(tmp_path: Path, *extra: str) -> str:
    env = {**os.environ, SWEEP_DIR_VAR: str(tmp_path), PROGRESS_VAR: PROGRESS_LINES}
    argv = [sys.executable, "cli.py", "fit", *TINY_RUN, f"--trainer.default_root_dir={tmp_path}", *extra]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, check=True)
    return out.stdout + out.stderr


def test_a_sweeps_run_prints_its_progress_and_nothing_a_user_scrolls_past(tmp_path):
    """No Lightning notes (seed, devices, tips, why fit stopped), no model summary, no library deprecation;
    the model summary comes back when the run asks for it."""
    text = _fit(tmp_path)
    assert "step 4/4" in text and "done: step 4/4" in text
    noises = ("Seed set", "GPU available", "Tip:", "Trainable params", "LeafSpec", "`Trainer.fit` stopped", "`srun`")
    for noise in noises:
        assert noise not in text, noise
    assert "Trainable params" in _fit(tmp_path, "--trainer.enable_model_summary=true")


HINT = "The `srun` command is available on your system but is not used"
DETECT = "from lightning.fabric.plugins.environments import SLURMEnvironment; SLURMEnvironment.detect()"


def _login_node(tmp_path: Path) -> dict[str, str]:
    """A cluster's login node, whatever this machine is: an `srun` on PATH (a stub nothing runs), no SLURM job."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    return env | {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_lightnings_srun_hint_is_silenced_for_every_command(tmp_path):
    """Lightning suggests `srun` wherever it finds one and SLURM did not start the process; `cli.py` silences it
    before any command runs, so a user's `fit` (outside a sweep, Lightning's other notes shown) and `prepare` (which
    silenced it alone before) print no hint."""
    env = _login_node(tmp_path)
    run = lambda *argv: subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=True)  # noqa: E731
    assert HINT in run(sys.executable, "-c", DETECT).stderr  # what the stub makes Lightning say
    assert HINT not in run(sys.executable, "-c", f"import cli; {DETECT}").stderr
    fit = run(
        sys.executable, "cli.py", "fit", *TINY_RUN, f"--trainer.default_root_dir={tmp_path}", "--trainer.max_steps=2"
    )
    assert "GPU available" in fit.stderr and "srun" not in fit.stdout + fit.stderr
    prepare = run(sys.executable, "cli.py", "prepare", *TINY_RUN)
    assert "prepared TextDataModule" in prepare.stdout and "srun" not in prepare.stdout + prepare.stderr
