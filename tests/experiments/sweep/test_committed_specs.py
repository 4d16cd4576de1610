"""Every committed spec and `sweep.json` still loads, and resolves to the cells it did before the spec was typed.

`committed_specs.json` holds what the untyped parser (main at e209f88) made of each spec (`Spec.snapshot`: the
cells' names and overrides, axes, seeds, baseline, tune, ladder, report options) and, for each committed
`sweep.json`, whether it matched its spec's snapshot then: a study folder that resumed before resumes now.

A spec written since (issue 49's `*_rerun.yaml`) has no untyped parser's reading to be compared with: it is listed
with its snapshot at the commit that adds it (`snapshot(spec)` below, one line in the file's sorted order), so a
later change to the parser, or to a spec it extends, that moves its cells fails here as it does for the others.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.sweep.same_sweep import snapshot_of
from experiments.sweep.spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
EXPECTED = json.loads((Path(__file__).parent / "committed_specs.json").read_text())
SPECS = sorted((ROOT / "experiments").glob("*.yaml")) + sorted((ROOT / "experiments" / "studies").glob("*/*.yaml"))
SWEEP_JSONS = sorted((ROOT / "experiments").glob("**/sweep.json"))
SPELT = ("spec", "require_clean", "base", "fixed")  # how a run's settings are written: check_same_sweep resolves them


def snapshot(spec: str) -> dict:
    """The spec's snapshot as JSON data, loaded the way `cli.py sweep` does (a path from the repository root)."""
    return json.loads(json.dumps(load_spec(spec).snapshot(), default=str))


def test_every_committed_spec_is_listed():
    assert {str(s.relative_to(ROOT)) for s in SPECS} == set(EXPECTED["specs"])
    assert {str(p.relative_to(ROOT)) for p in SWEEP_JSONS} == set(EXPECTED["sweep_json_matches_spec"])


@pytest.mark.parametrize("spec", sorted(EXPECTED["specs"]), ids=lambda s: Path(s).stem)
def test_a_committed_spec_resolves_to_the_same_cells(spec, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert snapshot(spec) == EXPECTED["specs"][spec]


@pytest.mark.parametrize("path", sorted(EXPECTED["sweep_json_matches_spec"]), ids=lambda p: str(Path(p).parent))
def test_a_committed_sweep_json_matches_its_spec_as_before(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    old = json.loads((ROOT / path).read_text())
    assert old["cells"] and all("name" in c and "overrides" in c for c in old["cells"])
    if not (ROOT / old["spec"]).exists():  # a superseded sweep of a spec since moved into its study
        assert not EXPECTED["sweep_json_matches_spec"][path]
        return
    new = {k: v for k, v in snapshot(old["spec"]).items() if k not in SPELT}
    old = {k: v for k, v in snapshot_of(old).items() if k not in SPELT}
    assert (old == new) == EXPECTED["sweep_json_matches_spec"][path]
