"""Claims (`experiments.sweep.claims`): a live claim is respected, a stale one (dead pid, reused pid,
silent foreign host, half-written file) is taken over by exactly one taker, a claim is released only by
its holder; and the ledger keeps the rows of several sweeps sharing a folder."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.records.ledger import Ledger
from experiments.sweep import claims
from experiments.sweep.claims import CLAIM_NAME, Claimed, acquire, read_claim
from experiments.sweep.launchers.pool import run_claimed
from experiments.sweep.processes import Processes
from experiments.sweep.recording import Progress
from experiments.sweep.runner import CLAIMED
from experiments.sweep.runs import Run
from experiments.sweep.task import follow, lead


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def write_claim(run_dir: Path, age_s: float = 0.0, **fields) -> Path:
    """A claim file as another process would have left it, `age_s` seconds since its last heartbeat."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / CLAIM_NAME
    info = claims.identity() | {"token": "theirs"} | fields
    path.write_text(json.dumps(info))
    os.utime(path, (time.time() - age_s, time.time() - age_s))
    return path


def test_claim_holds_who_and_is_released(tmp_path):
    run_dir = tmp_path / "cell" / "seed0"
    with acquire(run_dir) as claim:
        info = json.loads((run_dir / CLAIM_NAME).read_text())
        assert info["host"] == socket.gethostname() and info["pid"] == os.getpid() and info["started"]
        assert claim.ours() and read_claim(run_dir)["token"] == info["token"]
    assert not (run_dir / CLAIM_NAME).exists()


def test_live_claim_is_respected(tmp_path):
    write_claim(tmp_path, pid=os.getpid(), started="2025-01-01 12:00:00")  # this process: alive
    with pytest.raises(Claimed) as held:
        acquire(tmp_path)
    message = str(held.value)
    assert message == f"claimed by {socket.gethostname()}:{os.getpid()}, running since 2025-01-01 12:00:00"
    assert json.loads((tmp_path / CLAIM_NAME).read_text())["token"] == "theirs"  # untouched


@pytest.mark.parametrize(
    "fields, age_s",
    [
        ({"pid": "dead"}, 0.0),  # same host, its process is gone
        ({"process_start": "1"}, 0.0),  # same host, the pid lives but is another process (reused)
        ({"host": "elsewhere", "pid": 1}, claims.STALE_AFTER_S + 60),  # other host, no heartbeat for long
    ],
    ids=["dead-pid", "reused-pid", "silent-host"],
)
def test_stale_claim_is_taken_over(tmp_path, fields, age_s):
    if fields.get("pid") == "dead":
        fields = {"pid": dead_pid()}
    elif "process_start" in fields:
        fields = {"pid": os.getpid(), "process_start": "1"}
    write_claim(tmp_path, age_s, **fields)
    with acquire(tmp_path) as claim:
        assert json.loads((tmp_path / CLAIM_NAME).read_text())["token"] == claim.info["token"] != "theirs"
    assert not list(tmp_path.iterdir())  # no private copies left behind


def test_foreign_claim_with_heartbeat_and_fresh_empty_claim_are_respected(tmp_path):
    write_claim(tmp_path / "a", age_s=claims.STALE_AFTER_S - 60, host="elsewhere", pid=1, job="42")
    with pytest.raises(Claimed, match=r"claimed by elsewhere:1, .* \(job 42\)"):
        acquire(tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / CLAIM_NAME).write_text("")  # its writer is between O_EXCL and write
    with pytest.raises(Claimed):
        acquire(tmp_path / "b")
    old = time.time() - claims.WRITE_GRACE_S - 10
    os.utime(tmp_path / "b" / CLAIM_NAME, (old, old))  # ... or was killed there
    acquire(tmp_path / "b").release()


def test_release_never_removes_another_holders_claim(tmp_path):
    claim = acquire(tmp_path)
    write_claim(tmp_path, pid=os.getpid())  # as if taken over meanwhile
    claim.release()
    assert json.loads((tmp_path / CLAIM_NAME).read_text())["token"] == "theirs"


def test_heartbeat_refreshes_the_claim(tmp_path, monkeypatch):
    monkeypatch.setattr(claims, "HEARTBEAT_S", 0.05)
    with acquire(tmp_path):
        old = time.time() - 3600
        os.utime(tmp_path / CLAIM_NAME, (old, old))
        time.sleep(0.3)
        assert time.time() - (tmp_path / CLAIM_NAME).stat().st_mtime < 60


def _race(run_dir: str, start, done, results) -> None:
    start.wait()
    try:
        acquire(Path(run_dir))
        results.put("won")
    except Claimed:
        results.put("lost")
    done.wait()  # stay alive (a live holder) until every taker has tried


def test_one_of_many_takers_wins_a_stale_claim(tmp_path):
    write_claim(tmp_path, pid=dead_pid())
    ctx = multiprocessing.get_context("fork")
    start, done, results = ctx.Event(), ctx.Event(), ctx.Queue()
    takers = [ctx.Process(target=_race, args=(str(tmp_path), start, done, results)) for _ in range(6)]
    for taker in takers:
        taker.start()
    start.set()
    outcomes = sorted(results.get(timeout=60) for _ in takers)
    done.set()
    for taker in takers:
        taker.join(timeout=60)
    assert outcomes == ["lost"] * 5 + ["won"]


def _run(tmp_path: Path) -> Run:
    return Run("cell", 0, tmp_path / "cell" / "seed0", ("--never-run",), 1)


def test_sweep_skips_a_claimed_run_without_running_or_recording_it(tmp_path):
    run = _run(tmp_path)
    write_claim(run.dir, pid=os.getpid(), started="2025-01-01 12:00:00")
    ledger = Ledger(tmp_path / "results.csv")
    result, started = run_claimed(run, ledger, False, False, Processes(), Progress([run], ledger, False, 1))
    assert result.status == CLAIMED and "running since 2025-01-01 12:00:00" in result.error and started is None
    assert sorted(p.name for p in run.dir.iterdir()) == [CLAIM_NAME]  # no run.log: nothing started


def test_job_task_respects_claims(tmp_path, capsys, monkeypatch):
    run = _run(tmp_path)
    write_claim(run.dir, pid=os.getpid())
    assert lead(run, "7", Processes()) == 0  # claimed elsewhere: not this job's to run
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["status"] == CLAIMED
    # a further task of job 7 runs only what job 7's first task started: here it gives up
    monkeypatch.setattr("experiments.sweep.task.FOLLOW_TIMEOUT_S", 0.1)
    assert follow(run, 1, "7", Processes()) == 0
    assert "did not start the run" in capsys.readouterr().out
    write_claim(run.dir, pid=os.getpid(), job="7", action="finished")  # job 7 found it finished
    assert follow(run, 1, "7", Processes()) == 0
    assert sorted(p.name for p in run.dir.iterdir()) == [CLAIM_NAME]


def test_ledger_keeps_rows_of_sweeps_sharing_the_folder(tmp_path):
    path = tmp_path / "results.csv"
    first, second = Ledger(path), Ledger(path)  # two sweeps, each read the (empty) ledger at its start
    first.put({"cell": "a", "seed": "0", "status": "done"})
    second.put({"cell": "b", "seed": "0", "status": "done"})
    assert set(Ledger(path).rows) == {("a", 0), ("b", 0)}
