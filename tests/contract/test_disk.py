"""`contract.disk`: a full disk found in an error's chain and said in one line; the writers that name their file; an
atomic write that fails keeps the old file; a run the disk stopped runs again without `--retry-failed`; a run's log
that fills the disk does not end the run."""

from __future__ import annotations

import errno
import os

import pytest

from contract.disk import DiskFull, disk_full, disk_full_line, free_space, says_disk_full, writing
from contract.files import write_atomic
from contract.run_folder import DONE, FAILED
from experiments.records.ledger import Ledger
from experiments.sweep.runner import Outcome, RunLog, plan
from experiments.sweep.runs import Run
from tests.full_disk import Disk, install

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_is_found_through_the_errors_raised_from_it():
    try:
        try:
            raise ENOSPC
        except OSError as err:
            raise RuntimeError("the checkpoint could not be saved") from err
    except RuntimeError as outer:
        assert disk_full(outer) is ENOSPC
    try:
        try:
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), "/q/file")
        except OSError:
            raise ValueError("while handling it")  # noqa: B904 (the context, not the cause)
    except ValueError as outer:
        assert disk_full(outer).errno == errno.EDQUOT
    assert disk_full(OSError(errno.EACCES, "Permission denied", "/x")) is None and disk_full(ValueError()) is None


def test_the_line_names_the_path_the_free_space_and_what_to_do(tmp_path):
    free = free_space(tmp_path)
    assert free.split()[1] in ("B", "kB", "MB", "GB", "TB") and float(free.split()[0]) >= 0
    assert free_space(tmp_path / "not" / "yet") == free  # measured at the nearest folder that exists
    moved = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/tmp/x123", None, str(tmp_path / "last.ckpt"))
    assert disk_full_line(moved) == (
        f"error: no space left on device writing {tmp_path / 'last.ckpt'} ({free} free there): free space on that "
        "disk, or write elsewhere, and run the same command again"
    )
    assert f"writing {tmp_path} (" in disk_full_line(ENOSPC, fallback=tmp_path)  # a write() names no file
    assert says_disk_full(disk_full_line(moved)) and says_disk_full("OSError: [Errno 28] No space left on device")
    assert says_disk_full("OSError: [Errno 122] Disk quota exceeded") and not says_disk_full("error: data: no file")
    assert disk_full_line(DiskFull(tmp_path, "error: the sweep's own")) == "error: the sweep's own"


def test_a_writer_names_its_file(tmp_path):
    with pytest.raises(OSError) as raised, writing(tmp_path / "train.bin"):
        raise ENOSPC
    assert raised.value.filename == str(tmp_path / "train.bin") and raised.value.errno == errno.ENOSPC
    with pytest.raises(OSError) as raised, writing(tmp_path / "store"):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / ".store.tmp/manifest.json"))
    assert raised.value.filename.endswith(".store.tmp/manifest.json")  # named already: kept
    with pytest.raises(OSError) as raised, writing(tmp_path / "store", instead=True):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / ".store.tmp/manifest.json"))
    assert raised.value.filename == str(tmp_path / "store")  # the temporary file is gone with the failed write


def test_an_atomic_write_that_does_not_fit_keeps_the_old_file(tmp_path):
    path = tmp_path / "results.csv"
    write_atomic(path, "cell,seed\na,0\n")
    undo = install(Disk(tmp_path, tmp_path.parent / f"{tmp_path.name}.full", larger_than=20))
    try:
        with pytest.raises(OSError) as raised:
            write_atomic(path, "cell,seed\na,0\nb,0\nc,0\n")
    finally:
        undo()
    assert raised.value.filename == str(path) and disk_full(raised.value) is not None
    assert path.read_text() == "cell,seed\na,0\n" and sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]


@pytest.mark.parametrize(
    "error, action",
    [
        ("error: no space left on device writing /runs/x/run.json (0 B free there): free space ...", "start"),
        ("RuntimeError: the loss is nan", "skip"),
    ],
)
def test_a_run_the_disk_stopped_runs_again_without_retry_failed(tmp_path, error, action):
    run = Run("cell", 0, tmp_path / "cell" / "seed0", ("--seed_everything=0",), 1)
    ledger = Ledger(tmp_path / "results.csv")
    ledger.put({"cell": "cell", "seed": "0", "status": FAILED, "error": error})
    assert plan(run, ledger, retry_failed=False) == action
    assert plan(run, ledger, retry_failed=True) == "start"


def test_a_run_log_that_fills_the_disk_lets_the_run_decide(tmp_path):
    undo = install(Disk(tmp_path, tmp_path.parent / f"{tmp_path.name}.full", larger_than=10))
    try:
        with RunLog(tmp_path / "run.log") as log:
            log.write(b"=== start\n")
            log.write(b"step 4/12  train/loss 4.6 ...\n")  # fills it: dropped, and the rest with it
            log.write(b"x\n")
    finally:
        undo()
    assert (tmp_path / "run.log").read_bytes() == b"=== start\n" and log.full.filename == str(tmp_path / "run.log")
    assert log.outcome(Outcome(DONE)) == Outcome(DONE)  # the run's own outcome stands
    failed = log.outcome(Outcome(FAILED, "exit status 1"))
    assert failed.status == FAILED and failed.error.startswith(f"error: no space left on device writing {log.path} (")
    own = Outcome(FAILED, "error: no space left on device writing /runs/x/last.ckpt (0 B free there): ...")
    assert log.outcome(own) == own
