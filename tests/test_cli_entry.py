"""What `cli.py` sets for the whole process before anything else runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
