"""The repository passes `ruff check` with the configuration in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_check_passes():
    pytest.importorskip("ruff")  # listed in requirements-test.txt
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", str(ROOT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"ruff check failed:\n{result.stdout}{result.stderr}"
