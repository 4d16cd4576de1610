"""Shared helpers for the DataModule tests: repo-root imports and the read-only shared data."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # so plain `pytest` finds the packages, not only `python -m pytest`

SHARED_DATA = ROOT.parent / "shared" / "data"  # `../shared/data` from the project root; never copied


@pytest.fixture(scope="session")
def shared_data():
    """Path of a dataset folder under ../shared/data, skipping the test when it is absent."""

    def get(name: str) -> Path:
        path = SHARED_DATA / name
        if not path.is_dir():
            pytest.skip(f"shared data {path} not present (offline copy of {name})")
        return path

    return get
