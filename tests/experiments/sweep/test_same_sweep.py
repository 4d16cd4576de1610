"""A sweep folder's `sweep.json` keeps each cell's resolved config, and a resumed sweep is the same sweep
when its cells resolve to the same configs: a spec refactored into a shared base config resumes its folder,
one that changes a run's value is refused with the key named; an older `sweep.json` (no resolved configs)
is compared by its spec as written, then by what its arguments resolve to now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from experiments.sweep.same_sweep import RESOLVED, check_same_sweep, sweep_info
from experiments.sweep.spec import SpecError, load_spec
from experiments.sweep.validate import check_spec
from tests.conftest import BASE, FIXED

GRID = {"model.arch.pos_encoding": ["learned", "alibi"]}
MOVED = {"model.arch.d_model": 32, "model.arch.n_layers": 1}  # what the refactored spec takes from a base config


def checked(path: Path):
    spec = load_spec(path)
    return spec, check_spec(spec)


def write_sweep_json(out: Path, path: Path, resolved: bool = True) -> dict:
    """The `sweep.json` a sweep of the spec at `path` writes (without resolved configs: an older one)."""
    info = sweep_info(*checked(path))
    if not resolved:
        for cell in info["cells"]:
            del cell[RESOLVED]
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(info))
    return info


def refactored_spec(tmp_path: Path, **moved) -> Path:
    """The tiny spec with MOVED (or `moved`) taken out of `fixed` into a base config of its own."""
    overlay = tmp_path / "overlay.yaml"
    arch = {key.rsplit(".", 1)[1]: value for key, value in (MOVED | moved).items()}
    overlay.write_text(yaml.safe_dump({"model": {"init_args": {"arch": arch}}}))
    fixed = {k: v for k, v in FIXED.items() if k not in MOVED}
    spec = {"base": [*BASE, str(overlay)], "fixed": fixed, "checkpoint_every": 2, "grid": GRID}
    path = tmp_path / "refactored.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_sweep_json_keeps_each_cells_resolved_config(tmp_path, tiny_spec):
    info = write_sweep_json(tmp_path / "out", tiny_spec(tmp_path / "spec.yaml", grid=GRID))
    for cell in info["cells"]:
        resolved = cell[RESOLVED]
        assert "config" not in resolved  # the config files' paths say where the repository is, not what runs
        arch = resolved["model"]["init_args"]["arch"]
        assert arch["pos_encoding"] == cell["overrides"]["model.arch.pos_encoding"] and arch["d_model"] == 32
        assert resolved["trainer"]["max_steps"] == 12 and resolved["data"]["init_args"]["seq_len"] == 16


@pytest.mark.parametrize("resolved", [True, False], ids=["resolved", "older-sweep-json"])
def test_a_spec_refactored_into_a_base_config_resumes_its_folder(tmp_path, tiny_spec, resolved):
    out = tmp_path / "out"
    write_sweep_json(out, tiny_spec(tmp_path / "spec.yaml", grid=GRID), resolved=resolved)
    check_same_sweep(out, *checked(refactored_spec(tmp_path)))  # the same runs, spelt otherwise
    with pytest.raises(SpecError, match=r"cell pos_encoding=learned \(model.init_args.arch.d_model: 32 -> 48\)"):
        check_same_sweep(out, *checked(refactored_spec(tmp_path, **{"model.arch.d_model": 48})))


def test_more_cells_and_seeds_are_the_same_sweep(tmp_path, tiny_spec):
    out = tmp_path / "out"
    write_sweep_json(out, tiny_spec(tmp_path / "spec.yaml", grid=GRID))
    more = {"model.arch.pos_encoding": ["learned", "alibi", "rope"]}
    check_same_sweep(out, *checked(tiny_spec(tmp_path / "more.yaml", grid=more, seeds=[0, 1, 2])))
    with pytest.raises(SpecError, match=r"checkpoint_every \(2 -> 4\)"):
        check_same_sweep(out, *checked(tiny_spec(tmp_path / "every.yaml", grid=GRID, checkpoint_every=4)))


def test_a_different_spec_with_no_shared_cell_is_refused_by_its_settings(tmp_path, tiny_spec):
    """A spec whose cells the folder does not have would once pass (only shared cells were compared) and mix two
    sweeps: the settings every cell of each shares must agree; the axes they vary may differ."""
    out = tmp_path / "out"
    write_sweep_json(out, tiny_spec(tmp_path / "spec.yaml", grid=GRID))
    norms = {"model.arch.norm": ["layernorm", "rmsnorm"]}
    other = tiny_spec(tmp_path / "other.yaml", more_fixed={"trainer.max_steps": 8}, grid=norms)
    with pytest.raises(SpecError, match=r"settings of every cell \(trainer.max_steps: 12 -> 8\)"):
        check_same_sweep(out, *checked(other))
    check_same_sweep(out, *checked(tiny_spec(tmp_path / "norms.yaml", grid=norms)))  # same settings: more cells
    # one cell, then another of the same axis: the value each sweep keeps constant is an axis, not a setting
    single = tmp_path / "single"
    write_sweep_json(single, tiny_spec(tmp_path / "a.yaml", grid={"model.arch.pos_encoding": ["learned"]}))
    check_same_sweep(single, *checked(tiny_spec(tmp_path / "b.yaml", grid={"model.arch.pos_encoding": ["alibi"]})))


def test_an_argument_only_one_side_has_is_not_compared(tmp_path, tiny_spec):
    """An argument the code gained since the folder's sweep started is not a change of its runs' settings."""
    out = tmp_path / "out"
    path = tiny_spec(tmp_path / "spec.yaml", grid=GRID)
    info = write_sweep_json(out, path)
    for cell in info["cells"]:
        del cell[RESOLVED]["model"]["init_args"]["arch"]["rope_base"]
    (out / "sweep.json").write_text(json.dumps(info))
    check_same_sweep(out, *checked(path))
    info["cells"][1][RESOLVED]["trainer"]["max_steps"] = 10
    (out / "sweep.json").write_text(json.dumps(info))
    with pytest.raises(SpecError, match=r"cell pos_encoding=alibi \(trainer.max_steps: 10 -> 12\)"):
        check_same_sweep(out, *checked(path))


def test_an_older_sweep_json_whose_base_is_gone_is_compared_as_written(tmp_path, tiny_spec):
    out = tmp_path / "out"
    info = write_sweep_json(out, tiny_spec(tmp_path / "spec.yaml", grid=GRID), resolved=False)
    info["base"] = [*BASE, "configs/gpt/gone.yaml"]
    (out / "sweep.json").write_text(json.dumps(info))
    with pytest.raises(SpecError, match="different base"):
        check_same_sweep(out, *checked(refactored_spec(tmp_path)))
