"""The layers of ../shared/DESIGN.md hold: import-linter's contracts (pyproject.toml) pass, and the modules
that must start without Lightning do (checked in a fresh interpreter; `python -X importtime -c "import M"`
shows where the time of one that fails goes)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "lightning", "pytorch_lightning", "torchmetrics", "jsonargparse")


def test_import_contracts_hold():
    # a missing tool fails: a skipped contract check reads as a kept one
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint is not None, f"lint-imports is not beside {sys.executable}: pip install -r requirements-test.txt"
    result = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"an import contract is broken:\n{result.stdout}{result.stderr}"


def test_a_missing_linter_fails_rather_than_skips(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: None)
    with pytest.raises(AssertionError, match="lint-imports is not beside"):
        test_import_contracts_hold()


@pytest.mark.parametrize(
    "module",
    [
        "contract.run_folder",
        "contract.run_record",
        "contract.git",
        "contract.metrics",
        "experiments.records.ledger",
        "experiments.analysis.sweep_report",  # `cli.py report` reads a sweep without Lightning
        "experiments.sweep.task",  # a scheduler job, until it becomes a run
        "experiments.sweep.launchers",
        "tools.report",
    ],
)
def test_starts_without_torch_or_lightning(module):
    """Imported in a fresh interpreter, the module loads none of the heavy packages."""
    code = (
        f"import sys, {module}\n"
        f"loaded = sorted({{name.split('.')[0] for name in sys.modules}} & set({HEAVY!r}))\n"
        "assert not loaded, loaded"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"importing {module}: {result.stderr.strip().splitlines()[-1]}"
