"""A run's last step is validated and saved whatever the intervals (`callbacks.FinalStep`): with `max_steps` 5,
validation every 2 and a sweep's checkpoint every 2, the run's last metrics and `last.ckpt` are step 5's, not 4's,
and a test of that checkpoint records the step it evaluated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import cli
from contract.run_record import read_run_record
from lit_modules.step_time import StepTime

CONFIGS = ["-c", "configs/gpt/base.yaml", "-c", "configs/gpt/tiny.yaml"]
TINY = ["--model.arch.d_model=32", "--model.arch.n_layers=1", "--model.sample_tokens=0", "--data.seq_len=16",
        "--data.batch_size=8", "--data.val_tokens=256", "--data.eval_lengths=[16]", "--trainer.num_sanity_val_steps=0",
        "--trainer.enable_model_summary=false", "--trainer.enable_progress_bar=false"]  # fmt: skip


def _fit(out: Path, max_steps: int, every: int) -> list[str]:
    checkpoint = {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                  "init_args": {"dirpath": str(out / "run/checkpoints"), "every_n_train_steps": every,
                                "save_last": True, "save_top_k": 0}}  # fmt: skip
    return ["fit", *CONFIGS, *TINY, f"--trainer.max_steps={max_steps}", f"--trainer.val_check_interval={every}",
            f"--trainer.logger.init_args.save_dir={out}", "--trainer.logger.init_args.name=run",
            "--trainer.logger.init_args.version=", f"--trainer.callbacks+={json.dumps(checkpoint)}"]  # fmt: skip


def _val_steps(run: Path) -> list[int]:
    events = EventAccumulator(str(run), size_guidance={"scalars": 0})
    events.Reload()
    return [e.step for e in events.Scalars("val/loss")]


def test_the_last_step_is_validated_saved_and_tested_when_no_interval_divides_it(tmp_path):
    on, off = tmp_path / "on", tmp_path / "off"  # max_steps on the intervals (4), and past them (5)
    assert cli.main(_fit(on, max_steps=4, every=2)) == 0 and cli.main(_fit(off, max_steps=5, every=2)) == 0
    assert sorted(p.name for p in (on / "run/checkpoints").iterdir()) == ["last.ckpt"]
    assert torch.load(on / "run/checkpoints/last.ckpt", map_location="cpu", weights_only=False)["global_step"] == 4
    # the same validations, then one more at the step after the last of them: the last step
    assert _val_steps(off / "run") == [*_val_steps(on / "run"), _val_steps(on / "run")[-1] + 1]
    run = off / "run"
    last = run / "checkpoints/last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=False)["global_step"] == 5
    assert read_run_record(run).steps == 5

    test = [
        "test",
        "--config",
        str(run / "config.yaml"),
        f"--ckpt_path={last}",
        "--trainer.logger=false",
        f"--trainer.default_root_dir={tmp_path}",
    ]
    assert cli.main(test) == 0
    tested = read_run_record(run).test
    assert tested is not None and tested.step == 5 and tested.checkpoint == "last.ckpt"


def test_a_run_that_crashes_is_recorded_failed_and_one_interrupted_stays_running(tmp_path, monkeypatch):
    """A validation file too short for its eval length fails the run at its first validation, after run.json was
    written: the record says `failed`, not `running` forever. Ctrl-C (an interruption, resumed later) keeps
    `running`."""
    (tmp_path / "train.txt").write_text("".join(f"line {i} of the training text\n" for i in range(300)))
    (tmp_path / "val.txt").write_text("too short\n")
    data = ["--data.corpus=files", f"--data.train_files={tmp_path / 'train.txt'}",
            f"--data.val_files={tmp_path / 'val.txt'}", f"--data.cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    out = tmp_path / "crash"
    with pytest.raises(SystemExit):
        cli.main([*_fit(out, max_steps=4, every=2), *data])
    assert read_run_record(out / "run").status == "failed"

    stopped = tmp_path / "stopped"

    def interrupt(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(StepTime, "on_train_batch_end", interrupt)
    with pytest.raises(SystemExit):  # Lightning's graceful shutdown on Ctrl-C: exit status 1
        cli.main(_fit(stopped, max_steps=4, every=2))
    assert read_run_record(stopped / "run").status == "running"


def test_a_plain_run_keeps_lightnings_default_checkpoint_saved_at_its_last_step(tmp_path):
    """Without a checkpoint callback of its own, Lightning's default ModelCheckpoint (saving at each validation)
    keeps its place, and saves the last step, which is validated; checkpointing can still be turned off."""
    plain = ["fit", *CONFIGS, *TINY, "--trainer.max_steps=5", "--trainer.val_check_interval=2"]
    assert cli.main([*plain, f"--trainer.logger.init_args.save_dir={tmp_path / 'default'}"]) == 0
    (saved,) = (tmp_path / "default").rglob("*.ckpt")
    assert torch.load(saved, map_location="cpu", weights_only=False)["global_step"] == 5
    off = [*plain, f"--trainer.logger.init_args.save_dir={tmp_path / 'off'}", "--trainer.enable_checkpointing=false"]
    assert cli.main(off) == 0 and not list((tmp_path / "off").rglob("*.ckpt"))
