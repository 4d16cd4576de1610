"""The typed spec: every block a dataclass, parsed in one place (`load_spec`), `extends:` merged before typing,
and every error naming the file and line of the key it is about, with the valid keys where a key is unknown."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest

from experiments.sweep.ladder import Ladder
from experiments.sweep.spec import SPEC_KEYS, Spec, SpecError, load_spec
from experiments.sweep.spec_blocks import LauncherOptions, Pretrained, ReportOptions
from experiments.sweep.spec_cells import Value

BASE = "base: [configs/gpt/base.yaml, configs/gpt/tiny.yaml]\n"
GRID = "grid:\n  model.arch.norm: [layernorm, rmsnorm]\n  model.arch.activation: [relu, gelu]\n"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def error_of(path: Path) -> str:
    with pytest.raises(SpecError) as err:
        load_spec(path)
    return str(err.value)


def test_every_block_is_typed():
    hints = typing.get_type_hints(Spec, localns={"Value": Value})
    for f in dataclasses.fields(Spec):  # no untyped block: a mapping field holds overrides or cells only
        assert hints[f.name] != dict[str, typing.Any], f.name
    blocks = {"launcher": LauncherOptions, "report": ReportOptions, "ladder": Ladder | None,
              "pretrained": Pretrained | None}  # fmt: skip
    assert {name: hints[name] for name in blocks} == blocks
    assert set(ReportOptions.keys()) <= set(SPEC_KEYS)


def test_blocks_are_parsed_into_their_dataclasses(tmp_path):
    ladder = "ladder:\n  - {name: s, model.arch.d_model: 32}\n  - {name: m, model.arch.d_model: 64}\n"
    launcher = "launcher: {partition: gpu, mem_gb: 8, slurm_setup: [module load cuda], slurm_qos: high}\n"
    report = "equivalence_margin: {val/loss: 0.05}\nladder_metrics: [val/loss@64]\n"
    spec = load_spec(write(tmp_path / "s.yaml", BASE + GRID + ladder + launcher + report))
    assert spec.launcher == LauncherOptions(partition="gpu", mem_gb=8, slurm_setup=("module load cuda",),
                                            slurm_other={"slurm_qos": "high"})  # fmt: skip
    assert spec.launcher.slurm() == {"slurm_partition": "gpu", "slurm_setup": ["module load cuda"], "slurm_qos": "high"}
    # a ladder compares within each size unless the spec says otherwise
    assert spec.report == ReportOptions({"val/loss": 0.05}, ("model.arch.d_model",), ("val/loss@64",))
    assert spec.ladder is not None and [r.name for r in spec.ladder.rungs] == ["s", "m"]
    assert len(spec.cells) == 8 and spec.axes[-1] == "model.arch.d_model"
    snapshot = spec.snapshot()
    assert snapshot["launcher"] == {"partition": "gpu", "mem_gb": 8, "slurm_setup": ["module load cuda"],
                                    "slurm_qos": "high"}  # fmt: skip
    assert snapshot["equivalence_margin"] == {"val/loss": 0.05} and snapshot["ladder_metrics"] == ["val/loss@64"]


@pytest.mark.parametrize(
    "text, line, expected",
    [
        (BASE + GRID + "sweeps: 2\n", 5, r"unknown top-level key\(s\) \['sweeps'\]; valid keys: \['extends', 'base'"),
        (BASE + GRID + "launcher:\n  partition: gpu\n  partiton: cpu\n", 7, "launcher: unknown key 'partiton'"),
        (BASE + GRID + "launcher:\n  timeout_min: 4h\n", 6, "launcher.timeout_min: needs int, got '4h'"),
        (
            BASE + GRID + "tune:\n  grid: {optim.lr: [0.001, 0.003]}\n  extnd: 1\n",
            7,
            r"tune: unknown key\(s\) \['extnd'\]; did you mean 'extend'\?; valid keys: \['grid', 'extend'",
        ),
        (BASE + GRID + "pretrained: {spec: p.yaml, files: {}, run: 0}\n", 5, r"pretrained: unknown key\(s\) \['run'\]"),
        (BASE + "cells:\n  - {name: a}\n  - {name: -b, model.arch.norm: rmsnorm}\n", 4, r"cells\[1\]: name '-b'"),
        (BASE + GRID + "seeds: [0, 0]\n", 5, r"seeds: \[0, 0\] repeats a seed"),
        (BASE + GRID + "compare_within: model.arch.nope\n", 5, "some, not all, of the spec's axes"),
        (BASE + GRID + "checkpoint_every: 0\n", 5, "checkpoint_every: needs a positive number"),
        (BASE + "grid: {model.arch.norm: []}\n", 2, "grid: axis 'model.arch.norm' needs a non-empty list"),
    ],
    ids=[
        "top-level",
        "launcher-key",
        "launcher-type",
        "tune-key",
        "pretrained-key",
        "cell-name",
        "seeds",
        "compare-within",
        "checkpoint-every",
        "grid",
    ],  # fmt: skip
)
def test_an_error_names_the_file_and_line_of_its_key(tmp_path, text, line, expected):
    path = write(tmp_path / "s.yaml", text)
    message = error_of(path)
    assert message.startswith(f"{path}:{line}: ") and re.search(expected, message), message
    assert "\n" not in message


def test_extends_is_merged_before_typing_and_errors_name_the_file_that_has_the_key(tmp_path):
    write(tmp_path / "parent.yaml", BASE + GRID + "launcher:\n  partition: gpu\n  timeout_min: 60\n")
    child = write(tmp_path / "child.yaml", "extends: parent.yaml\nlauncher: {mem_gb: 4}\nseeds: [1, 2]\n")
    spec = load_spec(child)
    assert spec.launcher == LauncherOptions(partition="gpu", timeout_min=60, mem_gb=4)  # merged key by key
    assert spec.seeds == (1, 2) and len(spec.cells) == 4 and spec.path == child
    bad_child = write(tmp_path / "bad_child.yaml", "extends: parent.yaml\nlauncher:\n  cpus_per_task: -1\n")
    assert error_of(bad_child).startswith(f"{bad_child}:3: launcher.cpus_per_task: needs a positive number")
    write(tmp_path / "bad_parent.yaml", BASE + GRID + "launcher:\n  nodes: two\n")
    inherits = write(tmp_path / "inherits.yaml", "extends: bad_parent.yaml\nseeds: [0]\n")
    assert error_of(inherits).startswith(f"{tmp_path / 'bad_parent.yaml'}:6: launcher.nodes: needs int")
    write(tmp_path / "loop.yaml", "extends: loop.yaml\n")
    assert "extends: cycle" in error_of(tmp_path / "loop.yaml")
