"""Multi-process training (Lightning DDP, gloo on CPU) is the same science as one process.

For every family, `cli.py fit` with 2 processes at per-process batch B/2 trains on the same global
batches as 1 process at batch B: the training losses agree step by step, and every validation
metric (computed over every validation example once) equals the single-process value. The runs
are real `cli.py` processes, as a user starts them; dropout is off (its draws are per process)."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from contract.run_record import read_run_record
from experiments.records.events import read_scalars

ROOT = Path(__file__).resolve().parents[1]
STEPS = 24
COMMON = [
    f"--trainer.max_steps={STEPS}",
    "--trainer.val_check_interval=12",
    "--trainer.log_every_n_steps=1",
    "--trainer.num_sanity_val_steps=0",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.accelerator=cpu",
    "--diagnostics.every_n_steps=12",
]
TINY_ARCH = ["--model.arch.d_model=32", "--model.arch.n_layers=1", "--model.arch.n_heads=2", "--model.arch.dropout=0.0"]
# family -> (configs, overrides, global batch); validation is limited to whole batches of the global
# batch (per process: the same number of half-size batches, which cover the same examples)
FAMILIES = {
    "gpt": (
        ["configs/gpt/base.yaml", "configs/gpt/tiny.yaml"],
        [*TINY_ARCH, "--data.seq_len=32", "--data.eval_lengths=[32, 64]", "--data.val_tokens=1600",
         "--model.sample_tokens=0"],
        8,
    ),
    "bert": (
        ["configs/bert/base.yaml", "configs/bert/tiny.yaml"],
        [*TINY_ARCH, "--data.seq_len=32", "--data.eval_lengths=[32]", "--data.val_tokens=1600"],
        8,
    ),
    "translation": (
        ["configs/translation/base.yaml", "configs/translation/tiny.yaml"],
        [*TINY_ARCH, "--trainer.limit_val_batches=2"],
        8,
    ),
    "vit": (
        ["configs/vit/base.yaml", "configs/vit/tiny.yaml"],
        [*TINY_ARCH, "--data.augment=false"],
        16,
    ),
}  # fmt: skip


def fit_command(family: str, processes: int, save_dir: Path, *extra: str) -> list[str]:
    configs, overrides, batch = FAMILIES[family]
    return [
        sys.executable, "cli.py", "fit", *(a for c in configs for a in ("-c", c)), *overrides, *COMMON,
        f"--data.batch_size={batch // processes}",
        f"--trainer.devices={processes}",
        f"--trainer.strategy={'ddp' if processes > 1 else 'auto'}",
        f"--trainer.logger.init_args.save_dir={save_dir}",
        "--trainer.logger.init_args.version=run",
        *extra,
    ]  # fmt: skip


def fit(family: str, processes: int, save_dir: Path, *extra: str) -> Path:
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run(fit_command(family, processes, save_dir, *extra), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return save_dir / "lightning_logs" / "run"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """`runs(family, processes)`: the run's folder, trained once per module."""
    done: dict[tuple[str, int], Path] = {}

    def get(family: str, processes: int) -> Path:
        if (family, processes) not in done:
            done[family, processes] = fit(family, processes, tmp_path_factory.mktemp(f"{family}{processes}"))
        return done[family, processes]

    return get


@pytest.mark.parametrize("family", FAMILIES)
def test_two_processes_train_and_validate_like_one(family, runs):
    one = read_scalars(runs(family, 1))
    two_dir = runs(family, 2)
    two = read_scalars(two_dir)
    losses_one, losses_two = one.curves["train/loss"], two.curves["train/loss"]
    assert sorted(losses_one) == sorted(losses_two) == list(range(STEPS))
    for step, value in losses_one.items():
        assert losses_two[step] == pytest.approx(value, rel=1e-4), f"train/loss at step {step}"
    val_tags = [t for t in one.curves if t.startswith("val/")]
    assert "val/loss" in val_tags and sorted(val_tags) == sorted(t for t in two.curves if t.startswith("val/"))
    for tag in val_tags:
        for step, value in one.curves[tag].items():
            if math.isnan(value):
                assert math.isnan(two.curves[tag][step]), tag
            else:
                assert two.curves[tag][step] == pytest.approx(value, rel=1e-4, abs=1e-6), f"{tag} at step {step}"
    # diagnostics: the same layers on either; every process's numbers gathered; the gradient (DDP's average of the
    # global batch's) has the same per-block norms as one process's
    diagnostics = sorted(t for t in one.curves if t.startswith("diagnostics/"))
    assert diagnostics == sorted(t for t in two.curves if t.startswith("diagnostics/"))
    grad_norms = [t for t in diagnostics if t.startswith("diagnostics/grad_norm/")]
    assert "diagnostics/attn_max_logit" in diagnostics and len(grad_norms) >= 2
    for tag in grad_norms:
        assert sorted(one.curves[tag]) == [0, 12]
        for step, value in one.curves[tag].items():
            assert two.curves[tag][step] == pytest.approx(value, rel=1e-4, abs=1e-7), f"{tag} at step {step}"
    # rank 0 alone writes the run's files
    assert len(list(two_dir.glob("events.out.tfevents.*"))) == 1
    info = read_run_record(two_dir)
    assert info.status == "done" and info.processes == 2 and info.steps == STEPS


def test_a_completep_model_trains_alike_on_one_or_two_processes(tmp_path, runs):
    """µP's per-parameter Adam groups and CompleteP's branch multipliers under DDP: the same losses as one
    process, and not those of the same model under `sp` (the flags took effect)."""
    completep = ["--model.arch.parametrization=completep", "--model.arch.base_width=16", "--model.arch.n_layers=2",
                 "--model.arch.base_depth=1"]  # fmt: skip
    one, two = (read_scalars(fit("gpt", n, tmp_path / str(n), *completep)).curves["train/loss"] for n in (1, 2))
    assert sorted(one) == sorted(two) == list(range(STEPS))
    for step, value in one.items():
        assert two[step] == pytest.approx(value, rel=1e-4), f"train/loss at step {step}"
    assert one[STEPS - 1] != pytest.approx(read_scalars(runs("gpt", 1)).curves["train/loss"][STEPS - 1], rel=1e-3)


def test_the_average_of_the_weights_is_the_same_on_one_or_two_processes(tmp_path):
    """`--averaging`: each process averages its replica (no collective), and the average's metrics are over every
    validation example, as the trained weights' are."""
    averaging = ["--averaging.kind=ema", "--averaging.decay=0.8"]
    one, two = (read_scalars(fit("gpt", n, tmp_path / str(n), *averaging)).curves for n in (1, 2))
    tags = sorted(t for t in one if t.startswith("val_avg/"))
    assert "val_avg/loss" in tags and tags == sorted(t for t in two if t.startswith("val_avg/"))
    for tag in tags:
        for step, value in one[tag].items():
            assert two[tag][step] == pytest.approx(value, rel=1e-4, abs=1e-6, nan_ok=True), f"{tag} at step {step}"
    assert one["val_avg/loss"] != one["val/loss"]


@pytest.mark.slow  # Lightning's resume on 2 processes (48 s); the per-family DDP tests stay; make test-all
def test_a_killed_ddp_run_resumes_to_the_same_end(tmp_path, runs):
    """SIGKILL to the launcher's process group mid-run; the resumed run ends where an uninterrupted one does."""
    checkpointing = [
        "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
        "--trainer.callbacks.every_n_train_steps=4",
        "--trainer.callbacks.save_last=true",
        f"--trainer.callbacks.dirpath={tmp_path / 'killed' / 'checkpoints'}",
    ]
    whole = read_scalars(runs("gpt", 2))
    command = fit_command("gpt", 2, tmp_path / "killed", *checkpointing)
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    last = tmp_path / "killed" / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 240
    while not last.exists():
        assert first.poll() is None, "the run ended before its first checkpoint"
        assert time.monotonic() < deadline, "no checkpoint after 240 s"
        time.sleep(0.01)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    time.sleep(0.2)
    assert zipfile.is_zipfile(last), "killed while writing the checkpoint (the sweep would start over)"
    run = tmp_path / "killed" / "lightning_logs" / "run"
    assert read_run_record(run).status == "running", "finished before the kill"
    resumed = subprocess.run([*command, f"--ckpt_path={last}"], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = read_scalars(run)
    assert read_run_record(run).status == "done"
    assert again.last("val/loss") == pytest.approx(whole.last("val/loss"), rel=1e-5)
    final = STEPS - 1
    assert again.curves["train/loss"][final] == pytest.approx(whole.curves["train/loss"][final], rel=1e-5)


def test_a_divergence_on_any_process_stops_every_process_once(tmp_path):
    run = fit("gpt", 2, tmp_path, "--model.optim.lr=1000", "--model.optim.warmup_steps=0", "--divergence.max_loss=6")
    info = read_run_record(run)
    assert info.status == "diverged" and info.diverged_at_step < STEPS
    assert info.steps == info.diverged_at_step


@pytest.fixture(scope="module")
def own_text(tmp_path_factory) -> tuple[Path, list[str], Path]:
    """A user's corpus of text files (Tiny Shakespeare's words, shuffled: generated here), the flags that train
    the GPT on it (epochs of 10 steps, so that a resume lands mid-epoch) and a one-process run of them."""
    import random

    root = tmp_path_factory.mktemp("own_text")
    rng = random.Random(0)
    words = "thou art more lovely and temperate rough winds do shake the darling buds of may".split()
    for i in range(3):
        lines = (" ".join(rng.choice(words) for _ in range(rng.randint(4, 14))) for _ in range(600))
        (root / f"part{i}.txt").write_text("\n".join(lines) + "\n")
    flags = ["--data.corpus=files", f"--data.train_files={root}/part*.txt", f"--data.cache_dir={root}/cache",
             "--data.train_batches_per_epoch=10"]  # fmt: skip
    return root, flags, fit("gpt", 1, root / "one", *flags)


def test_a_token_store_trains_alike_on_one_or_two_processes_with_loader_workers(own_text):
    root, flags, one_run = own_text
    one = read_scalars(one_run)
    two = read_scalars(fit("gpt", 2, root / "two", *flags, "--data.num_workers=2"))
    assert sorted(one.curves["train/loss"]) == list(range(STEPS))
    for step, value in one.curves["train/loss"].items():
        assert two.curves["train/loss"][step] == pytest.approx(value, rel=1e-4), f"train/loss at step {step}"
    assert two.last("val/loss") == pytest.approx(one.last("val/loss"), rel=1e-4)
    assert len([p for p in (root / "cache" / "token_stores").iterdir() if p.is_dir()]) == 1  # tokenized once


def test_a_run_on_a_token_store_killed_mid_epoch_resumes_with_the_same_batches(own_text):
    root, flags, whole_run = own_text
    whole = read_scalars(whole_run)
    checkpoints = root / "killed" / "checkpoints"
    command = fit_command("gpt", 1, root / "killed", *flags, "--data.num_workers=2",
                          "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
                          "--trainer.callbacks.every_n_train_steps=13", "--trainer.callbacks.save_last=true",
                          f"--trainer.callbacks.dirpath={checkpoints}")  # fmt: skip
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 240
    while not (checkpoints / "last.ckpt").exists():
        assert first.poll() is None and time.monotonic() < deadline, "no checkpoint"
        time.sleep(0.01)
    os.killpg(first.pid, signal.SIGKILL)  # mid-epoch: step 13 of epochs of 10
    first.wait()
    time.sleep(0.2)
    run = root / "killed" / "lightning_logs" / "run"
    assert read_run_record(run).status == "running", "finished before the kill"
    resumed = subprocess.run([*command, f"--ckpt_path={checkpoints / 'last.ckpt'}"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = read_scalars(run)
    for step in range(13, STEPS):  # every step after the restore trained on the uninterrupted run's batch
        assert again.curves["train/loss"][step] == pytest.approx(whole.curves["train/loss"][step], rel=1e-5), step
