"""Every sweep spec in experiments/ stays runnable: each validates (fast), and each runs in a smoke
mode — 1 seed, a few steps, every cell — in the slow set (`make test-all`)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from experiments import sweep

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "experiments").glob("*.yaml"))
SHARED = ROOT.parent / "shared" / "data"


def needs_shared_data(spec: Path) -> bool:
    return "../shared/data" in spec.read_text()


def smoke_spec(spec: Path, tmp_path: Path) -> Path:
    """The spec with one seed, two training steps and one validation batch."""
    data = yaml.safe_load(spec.read_text())
    data["seeds"] = data.get("seeds", [0])[:1]
    data["fixed"] = dict(data.get("fixed") or {}) | {
        "trainer.max_steps": 2,
        "trainer.val_check_interval": 2,
        "trainer.limit_val_batches": 1,
        "trainer.num_sanity_val_steps": 0,
    }
    data["checkpoint_every"] = 2
    path = tmp_path / spec.name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_specs_found():
    assert {"demo.yaml", "extrapolation.yaml", "norm_placement.yaml", "vit_positional.yaml"} <= {s.name for s in SPECS}


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_spec_validates(spec, tmp_path, capsys):
    if needs_shared_data(spec) and not SHARED.exists():
        pytest.skip(f"{SHARED} is absent")
    assert sweep.main([str(spec), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    commands = [line for line in capsys.readouterr().out.splitlines() if "cli.py fit" in line]
    data = yaml.safe_load(spec.read_text())
    assert len(commands) >= len(data.get("seeds", [0]))
    assert not (tmp_path / "out" / "results.csv").exists()  # a dry run writes nothing


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_spec_smoke_run(spec, tmp_path):
    if needs_shared_data(spec) and not SHARED.exists():
        pytest.skip(f"{SHARED} is absent")
    out = tmp_path / "out"
    assert sweep.main([str(smoke_spec(spec, tmp_path)), "--out", str(out), "--threads", "1"]) == 0
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert rows and all(r["status"] in ("done", "diverged") for r in rows)
    assert (out / "report.md").exists()
