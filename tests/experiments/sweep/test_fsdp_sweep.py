"""A sweep whose runs train sharded (`trainer.strategy: fsdp2` on 2 CPU processes, `lit_modules.sharding`): its
`last.ckpt` is a distributed checkpoint's folder, a SIGKILL to the sweep mid-run is survived like any run's, and the
resumed run reports the numbers of the same run on one unsharded process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contract.run_record import read_run_record
from experiments.sweep.runner import SHARDED_CHECKPOINT_FILES
from tests.experiments.sweep.sweep_outputs import by_run, read_rows
from tools import sweep

ROOT = Path(__file__).resolve().parents[3]
THREADS = ["--threads", "1"]
CELL = {"model.arch.pos_encoding": "alibi"}
METRICS = ("val/loss", "val/loss@16", "val/ppl", "train/loss")


def wait_for_whole_checkpoint(process: subprocess.Popen, checkpoint: Path) -> None:
    deadline = time.monotonic() + 300
    while not all((checkpoint / name).is_file() for name in SHARDED_CHECKPOINT_FILES):
        assert process.poll() is None, "the sweep ended before its first checkpoint"
        assert time.monotonic() < deadline, "no checkpoint after 300 s"
        time.sleep(0.02)


def test_a_sharded_sweep_run_killed_resumes_to_the_one_process_numbers(tiny_spec, tmp_path):
    one_spec = tiny_spec(tmp_path / "one.yaml", cells=[CELL], seeds=[0])
    assert sweep.main([str(one_spec), "--out", str(tmp_path / "one"), *THREADS]) == 0
    fsdp = {"trainer.strategy": "fsdp2", "trainer.devices": 2, "trainer.accelerator": "cpu", "data.batch_size": 4}
    spec = tiny_spec(tmp_path / "fsdp.yaml", more_fixed=fsdp, cells=[CELL], seeds=[0])
    out = tmp_path / "fsdp"
    command = [sys.executable, "cli.py", "sweep", str(spec), "--out", str(out), *THREADS]
    first = subprocess.Popen(command, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.STDOUT)  # fmt: skip
    run_dir = out / "pos_encoding=alibi" / "seed0"
    last = run_dir / "checkpoints" / "last.ckpt"
    wait_for_whole_checkpoint(first, last)
    os.killpg(first.pid, signal.SIGKILL)  # the sweep and both training processes
    first.wait()
    assert read_run_record(run_dir).status == "running", "finished before the kill"
    assert last.is_dir() and len(list(last.glob("*.distcp"))) == 2  # every rank's shards, none gathered
    assert sweep.main(command[3:]) == 0
    assert " resume: " in (run_dir / "run.log").read_text(), "the sweep did not resume the killed run"
    row = by_run(read_rows(out))[("pos_encoding=alibi", "0")]
    reference = by_run(read_rows(tmp_path / "one"))[("pos_encoding=alibi", "0")]
    assert row["status"] == "done" and row["steps"] == "12"
    for metric in METRICS:
        assert float(row[metric]) == pytest.approx(float(reference[metric]), rel=1e-5), metric
    assert read_run_record(run_dir).processes == 2
