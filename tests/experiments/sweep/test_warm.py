"""Warm starts (`experiments.sweep.warm`): a forked run behaves as a fresh `python SCRIPT` in everything
the sweep sees (output, exit status, signals, environment, threads), is stopped like one, and the
fork-safety guard, the code-change check and a dead warm process fall back or fail cleanly.

Most warm processes here preload only the standard library (fast); two tests import torch. The
sweep-level checks (identical results.csv, run.log and run files, warm vs `--no-warm`; SIGTERM and
resume) are in test_sweep_runs.py."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from experiments.sweep.processes import Processes, tee
from experiments.sweep.warm import PRELOAD, ROOT, Warm, WarmProcess

PROBE = """
import __main__, os, signal, sys, threading
print("argv", sys.argv, "cwd", os.getcwd(), "path0", sys.path[0], "file", __file__)
print("env", os.environ.get("WARM_TEST"), "SWEEP_DIR" in os.environ)
print("main", __name__, __main__.__spec__, "threads", threading.active_count())
print("signals", [str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGCHLD)])
print("stdout line-buffered", sys.stdout.line_buffering, "tty", sys.stdout.isatty(), "stdin", sys.stdin.read())
print("to stderr", file=sys.stderr)
"""
ENDINGS = {
    "normal": "",
    "exit-code": "sys.exit(3)",
    "exit-message": "sys.exit('a message')",
    "exit-large": "sys.exit(300)",
    "exception": "def f():\n    raise ValueError('boom')\nf()",
    "keyboard-interrupt": "raise KeyboardInterrupt",
    "thread-and-atexit": (
        "import atexit, time\natexit.register(lambda: print('atexit ran'))\nprint('unflushed', end='')\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('thread joined'))).start()"
    ),
}


class Recording(Processes):
    """Processes that remember what each start returned (a `WarmProcess` or a `subprocess.Popen`)."""

    def __init__(self, warm: Warm | None = None):
        super().__init__(warm)
        self.started: list[object] = []

    def start(self, argv, env, output):
        proc = super().start(argv, env, output)
        self.started.append(proc)
        return proc


def script(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


def environment(**extra: str) -> dict[str, str]:
    """Ours, but with stdout buffered as by default (PYTHONUNBUFFERED would hide the buffering set-up)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | extra


def run_script(procs: Processes, path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, bytes]:
    log = io.BytesIO()
    code, _ = tee([sys.executable, str(path), *args], environment(**(env or {})), log, False, procs)
    return code, log.getvalue()


@pytest.fixture(scope="module")
def warm():
    warm = Warm(preload=("json",))
    yield warm
    warm.close()


@pytest.mark.parametrize("ending", ENDINGS, ids=list(ENDINGS))
def test_a_forked_run_is_indistinguishable_from_a_fresh_interpreter(tmp_path, warm, ending):
    """Same output bytes (stdout and stderr interleaved as a pipe sees them, a traceback from the script's
    first frame) and the same exit status: SystemExit codes and messages, 1 after an exception, death by
    SIGINT after an uncaught KeyboardInterrupt, atexit handlers and non-daemon threads at exit."""
    path = script(tmp_path, "probe.py", PROBE + ENDINGS[ending])
    env = {"WARM_TEST": "the run's own"}
    cold, hot = Recording(), Recording(warm)
    fresh = run_script(cold, path, "an-arg", env=env)
    forked = run_script(hot, path, "an-arg", env=env)
    assert isinstance(hot.started[0], WarmProcess) and isinstance(cold.started[0], subprocess.Popen)
    assert warm.off is None
    assert forked == fresh
    expected = {
        "normal": 0,
        "exit-code": 3,
        "exit-message": 1,
        "exit-large": 300 & 0xFF,
        "exception": 1,
        "keyboard-interrupt": -signal.SIGINT,
        "thread-and-atexit": 0,
    }
    assert fresh[0] == expected[ending]
    assert b"env the run's own False" in fresh[1]
    if ending == "exception":
        assert fresh[1].count(b"\n  File ") == 2 and b"ValueError: boom" in fresh[1]  # <module>, f


def test_a_forked_run_gets_a_terminal_like_a_fresh_one(tmp_path, warm, monkeypatch):
    """Echoing to a terminal, a run writes to a pseudo-terminal: stdout line-buffered as in a fresh
    interpreter (a forked stdout is first the warm process's, block-buffered)."""
    master, slave = os.openpty()
    path = script(tmp_path, "probe.py", PROBE)
    with open(slave, "w") as terminal:  # our stdout, as tee sees it: a terminal
        monkeypatch.setattr(sys, "stdout", terminal)
        try:
            fresh, forked = (
                tee([sys.executable, str(path)], environment(), io.BytesIO(), True, Processes(w)) for w in (None, warm)
            )
        finally:
            os.close(master)
    assert fresh == forked
    assert "stdout line-buffered True tty True" in fresh[1]


def test_stopping_terminates_a_forked_run_gracefully(tmp_path):
    """An interrupted sweep's SIGTERM reaches the forked run itself (its handler runs: Lightning's
    graceful stop), and its exit status comes back, as for a fresh process."""
    warm = Warm(preload=("json",))
    ready = tmp_path / "ready"
    path = script(
        tmp_path,
        "graceful.py",
        f"""
        import pathlib, signal, sys, time
        def stop(signum, frame):
            print("stopping gracefully", flush=True)
            sys.exit(7)
        signal.signal(signal.SIGTERM, stop)
        pathlib.Path({str(ready)!r}).touch()
        time.sleep(60)
    """,
    )
    results = {}
    for name, procs in (("fresh", Processes()), ("forked", Recording(warm))):
        ready.unlink(missing_ok=True)
        worker = threading.Thread(target=lambda p=procs, n=name: results.__setitem__(n, run_script(p, path)))
        worker.start()
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert time.monotonic() < deadline and worker.is_alive(), "the script never started"
            time.sleep(0.01)
        procs.stop()
        worker.join(timeout=60)
        assert not worker.is_alive()
    warm.close()
    assert isinstance(procs.started[0], WarmProcess)
    assert results["forked"] == results["fresh"] == (7, b"stopping gracefully\n")


def write_module(folder: Path, name: str, body: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(body))


def test_a_thread_in_the_warm_process_turns_warm_starts_off_once(tmp_path, capsys):
    """Forking a process with another thread copies only one: the warm process refuses, the sweep says so
    once, and every run still runs, as a fresh process."""
    write_module(
        tmp_path,
        "starts_a_thread",
        "import threading, time\nthreading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n",
    )
    warm = Warm(preload=("starts_a_thread",))
    procs = Recording(warm)
    path = script(tmp_path, "hello.py", "print('hello')")
    try:
        results = [run_script(procs, path, env={"PYTHONPATH": str(tmp_path)}) for _ in range(2)]
    finally:
        warm.close()
    assert results == [(0, b"hello\n")] * 2
    assert all(isinstance(p, subprocess.Popen) for p in procs.started)
    assert "2 Python threads" in warm.off
    err = capsys.readouterr().err
    assert err.count("warm start off: 2 Python threads") == 1 and "fresh process" in err


def test_a_torch_op_in_the_warm_process_turns_warm_starts_off(tmp_path):
    """A parallel torch op starts the intra-op pool's native threads (invisible to `threading`); libgomp
    never tears its pool down at fork, so the kernel's thread count refuses it. The thread pools of
    OpenBLAS (numpy, scipy), which stop at fork, do not."""
    write_module(tmp_path, "runs_an_op", "import numpy, scipy, torch\ntorch.ones(1 << 22).sum()\n")
    warm = Warm(preload=("runs_an_op",))
    path = script(tmp_path, "hello.py", "print('hello')")
    env = {"PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"}
    try:
        assert run_script(Processes(warm), path, env=env) == (0, b"hello\n")
    finally:
        warm.close()
    assert warm.off is not None and "threads in the warm process" in warm.off and "Python" not in warm.off


def test_each_environment_has_its_warm_process_and_threads(tmp_path):
    """Libraries read thread counts when they load (libgomp, OpenBLAS, MKL): a warm process per
    environment imports under the run's own variables, so torch reports what a fresh process would. With
    2 threads numpy's OpenBLAS starts a pool at import, which stops at fork: no refusal."""
    warm = Warm(preload=("torch", "numpy"))
    procs = Recording(warm)
    path = script(
        tmp_path,
        "threads.py",
        """
        import os, numpy, torch
        print(torch.get_num_threads(), os.environ["OMP_NUM_THREADS"])
    """,
    )
    try:
        for threads in ("1", "2"):
            env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
            expected = (0, f"{threads} {threads}\n".encode())
            assert run_script(procs, path, env=env) == run_script(Processes(), path, env=env) == expected
        assert run_script(procs, path, env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}) == (0, b"1 1\n")
        assert len(warm._zygotes) == 2  # the third run reused the first one's
    finally:
        warm.close()
    assert warm.off is None and all(isinstance(p, WarmProcess) for p in procs.started)


def test_the_preload_is_everything_cli_py_imports():
    """The warm process names what it loads instead of importing the entry point (which no package may import):
    after `PRELOAD`, importing cli.py loads no module but itself, so a forked run starts as warm as before."""
    code = (
        "import importlib, sys\n"
        f"for name in {PRELOAD!r}: importlib.import_module(name)\n"
        "before = set(sys.modules)\n"
        "import cli\n"
        "print(sorted(set(sys.modules) - before))"
    )
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "['cli']", f"cli.py imports more than PRELOAD loads: {done.stdout.strip()}"


def test_a_changed_source_is_imported_again(tmp_path, capsys):
    """A run executes the code it records (git.diff, git_commit): after an edit to a module the warm process
    imported, a new warm process imports it again."""
    write_module(tmp_path, "mod", "VALUE = 1\n")
    warm = Warm(preload=("mod",), root=tmp_path)
    procs = Recording(warm)
    path = script(tmp_path, "value.py", "import mod\nprint(mod.VALUE)")
    env = {"PYTHONPATH": str(tmp_path)}
    try:
        assert run_script(procs, path, env=env) == (0, b"1\n")
        write_module(tmp_path, "mod", "VALUE = 22\n")
        assert run_script(procs, path, env=env) == (0, b"22\n")
        assert run_script(procs, path, env=env) == (0, b"22\n")
    finally:
        warm.close()
    assert all(isinstance(p, WarmProcess) for p in procs.started) and warm.off is None
    assert len(warm.restarts) == 1 and "mod.py changed" in warm.restarts[0]
    assert capsys.readouterr().err.count("importing the code again") == 1


def test_a_failing_import_falls_back_to_fresh_processes(tmp_path, capsys):
    """The warm process's imports fail: the run starts fresh and fails there as it would (its own traceback)."""
    write_module(tmp_path, "broken", "raise RuntimeError('half-edited module')\n")
    warm = Warm(preload=("broken",))
    path = script(tmp_path, "uses.py", "import broken")
    try:
        code, output = run_script(Recording(warm), path, env={"PYTHONPATH": str(tmp_path)})
    finally:
        warm.close()
    assert code == 1 and output.endswith(b"RuntimeError: half-edited module\n")
    assert "importing broken failed: RuntimeError: half-edited module" in warm.off
    assert "warm start off" in capsys.readouterr().err


def test_a_dead_warm_process_takes_its_runs_and_later_runs_start_fresh(tmp_path, capsys):
    """A run whose warm process dies cannot report how it ended: it is killed with it (not left training
    unsupervised), and later runs start as fresh processes."""
    ready = tmp_path / "ready"
    path = script(tmp_path, "waits.py", f"import pathlib, time\npathlib.Path({str(ready)!r}).touch()\ntime.sleep(60)")
    hello = script(tmp_path, "hello.py", "print('hello')")
    warm = Warm(preload=("json",))
    procs = Recording(warm)
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("run", run_script(procs, path)))
    try:
        worker.start()
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert time.monotonic() < deadline and worker.is_alive()
            time.sleep(0.01)
        (zygote,) = warm._zygotes.values()
        zygote.proc.kill()
        worker.join(timeout=30)
        assert result["run"] == (-signal.SIGKILL, b"")
        assert run_script(procs, hello) == (0, b"hello\n")
    finally:
        warm.close()
    assert [type(p) for p in procs.started] == [WarmProcess, subprocess.Popen]
    assert "the warm process ended" in warm.off or "cannot reach the warm process" in warm.off


def test_stopping_cancels_runs_waiting_for_the_imports(tmp_path):
    """Interrupted while the warm process still imports: the waiting run is not started later."""
    write_module(tmp_path, "slow", "import time\ntime.sleep(5)\n")
    warm = Warm(preload=("slow",))
    procs = Recording(warm)
    path = script(tmp_path, "hello.py", "print('hello')")
    result = {}
    worker = threading.Thread(
        target=lambda: result.setdefault("run", run_script(procs, path, env={"PYTHONPATH": str(tmp_path)}))
    )
    start = time.monotonic()
    worker.start()
    time.sleep(1.0)  # the request waits for the imports
    procs.stop()
    worker.join(timeout=30)
    warm.close()
    assert time.monotonic() - start < 4.5, "the run waited for the imports"
    assert result["run"] == (-signal.SIGTERM, b"")  # as a run terminated at once
    assert procs.started == [None] and warm.off is None
