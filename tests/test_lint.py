"""The repository passes `ruff check` and `ruff format --check` (the pinned ruff) with pyproject.toml's settings."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_check_passes():
    # a missing tool fails: a skipped lint reads as a clean one
    assert importlib.util.find_spec("ruff"), f"ruff is not installed in {sys.prefix}: see requirements-test.txt"
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", str(ROOT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"ruff check failed:\n{result.stdout}{result.stderr}"


def test_ruff_format_leaves_every_file_as_it_is():
    # `# fmt: skip` keeps a hand-aligned table or call as written; everything else is the formatter's
    result = subprocess.run([sys.executable, "-m", "ruff", "format", "--check", str(ROOT)], cwd=ROOT,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, f"ruff format --check failed (run `ruff format .`):\n{result.stdout}{result.stderr}"


def test_a_missing_ruff_fails_rather_than_skips(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)
    with pytest.raises(AssertionError, match="ruff is not installed"):
        test_ruff_check_passes()
