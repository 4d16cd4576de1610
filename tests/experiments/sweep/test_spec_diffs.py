"""A spec says only what it changes: a variant (`extends:`) restates no value it inherits, and no spec's
`fixed:` restates a value its base configs already set. A restated value is a second place to change (and
to forget): the value a run gets is the same without it.

One exception, found here rather than marked in the spec: a `fixed` value equal to the spec's base
configs' is kept when a spec built on it (`extends:`) has other base configs that set it otherwise (or
not at all), since that variant inherits it (peft_gpt.yaml's warmup, which the BERT fine-tunes take)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from experiments.sweep.spec import ROOT, read_spec
from tests.conftest import BASE

SPECS = sorted((ROOT / "experiments").glob("*.yaml")) + sorted((ROOT / "experiments" / "studies").glob("*/*.yaml"))
MERGED_KEYS = ("fixed", "launcher", "pretrained")  # merged key by key with the extended spec's (spec.read_spec)


def flat(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted CLI keys: `{"model": {"init_args": {"optim": {"lr": 1}}}}` -> `{"model.optim.lr": 1}`."""
    out = {}
    for key, value in mapping.items():
        dotted = f"{prefix}{key}".replace(".init_args.", ".").removesuffix(".init_args")
        if isinstance(value, dict) and value:
            out |= flat(value, f"{dotted}.")
        else:
            out[dotted] = value
    return out


def same(a: Any, b: Any) -> bool:
    """Equal as the parser reads them: `1e-2` (a string to YAML 1.1) is 0.01."""

    def number(v: Any) -> Any:
        if isinstance(v, str):
            try:
                return float(v)
            except ValueError:
                return v
        return v

    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else number(a) == number(b)


def base_values(base: list[str]) -> dict[str, tuple[Any, str]]:
    """What the config files set, key -> (value, file), the later file winning; a file that changes a
    group's `class_path` drops the keys the earlier files set in that group."""
    values: dict[str, tuple[Any, str]] = {}
    for path in base:
        config = flat(yaml.safe_load((ROOT / path).read_text()) or {})
        for key, value in config.items():
            group = key.split(".")[0]
            if key == f"{group}.class_path" and values.get(key, (value,))[0] != value:
                values = {k: v for k, v in values.items() if k.split(".")[0] != group}
            values[key] = (value, path)
    return values


def raw_spec(path: Path) -> dict[str, Any]:
    raw = yaml.safe_load(path.read_text()) or {}
    if isinstance(raw.get("pretrained"), dict) and "spec" in raw["pretrained"]:
        raw["pretrained"] = raw["pretrained"] | {"spec": str((path.parent / raw["pretrained"]["spec"]).resolve())}
    return raw


def parent_of(path: Path) -> Path | None:
    extends = raw_spec(path).get("extends")
    return (path.parent / extends).resolve() if extends else None


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def needed_by_a_variant(path: Path, key: str, value: Any, specs: list[Path]) -> bool:
    """Whether a spec built on `path` inherits `fixed.key` from it and has base configs that set it otherwise."""
    for spec in specs:
        chain, parent = [], parent_of(spec)
        while parent is not None and parent != path.resolve():
            chain.append(parent)
            parent = parent_of(parent)
        if parent is None or any(key in flat(raw_spec(p).get("fixed") or {}) for p in [spec, *chain]):
            continue
        theirs = base_values(read_spec(spec)["base"]).get(key)
        if theirs is None or not same(theirs[0], value):
            return True
    return False


def restatements(path: Path, specs: list[Path] = ()) -> list[str]:
    """`FILE: KEY: VALUE restates ...` for each value the spec at `path` restates (`specs`: the specs
    that may build on it)."""
    path = path.resolve()
    raw, parent_path = raw_spec(path), parent_of(path)
    parent = read_spec(parent_path) if parent_path else {}
    merged = read_spec(path)
    where = f"{shown(path)}: "
    found = []
    for key, value in raw.items():
        if key == "extends" or key in MERGED_KEYS or key not in parent:
            continue
        if value == parent[key]:
            found.append(f"{where}{key}: {value!r} is inherited from {parent_path.name} (extends)")
    for key in ("launcher", "pretrained"):
        for sub, value in (raw.get(key) or {}).items():
            if sub in (parent.get(key) or {}) and value == parent[key][sub]:
                found.append(f"{where}{key}.{sub}: {value!r} is inherited from {parent_path.name} (extends)")
    configs = base_values(merged["base"] if isinstance(merged["base"], list) else [merged["base"]])
    inherited = flat(parent.get("fixed") or {})
    for key, value in flat(raw.get("fixed") or {}).items():
        if key in inherited:
            if same(value, inherited[key]):
                found.append(f"{where}fixed.{key}: {value!r} is inherited from {parent_path.name} (extends)")
        elif key in configs and same(value, configs[key][0]) and not needed_by_a_variant(path, key, value, specs):
            found.append(f"{where}fixed.{key}: {value!r} is already set by {configs[key][1]} (base)")
    return found


def test_specs_found():
    assert len(SPECS) > 20 and any(parent_of(s) for s in SPECS)


def test_no_spec_restates_what_it_inherits():
    found = [line for spec in SPECS for line in restatements(spec, SPECS)]
    assert not found, "values restated (delete them: a run gets the same value without them):\n" + "\n".join(found)


@pytest.fixture
def specs(tmp_path):
    """`write(name, **entries)`: a spec file in tmp_path, its path."""

    def write(name: str, **entries: Any) -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(entries, sort_keys=False))
        return path

    return write


def test_a_variant_restating_what_it_inherits_is_named(specs):
    grid = {"model.arch.pos_encoding": ["learned", "rope"]}
    specs("study.yaml", base=BASE, fixed={"trainer.max_steps": 40}, grid=grid, seeds=[0, 1], require_clean=True,
          launcher={"partition": "gpu", "timeout_min": 60})  # fmt: skip
    variant = specs(
        "study_long.yaml", extends="study.yaml", fixed={"trainer.max_steps": 40, "trainer.val_check_interval": 20},
        seeds=[0, 1], require_clean=True, launcher={"timeout_min": 60, "mem_gb": 8}, grid=grid,
    )  # fmt: skip
    found = restatements(variant)
    name = str(variant)
    assert sorted(found) == sorted(
        f"{name}: {what} is inherited from study.yaml (extends)"
        for what in (
            "seeds: [0, 1]", "require_clean: True", f"grid: {grid!r}", "launcher.timeout_min: 60",
            "fixed.trainer.max_steps: 40",
        )
    )  # fmt: skip
    tidy = specs("study_tidy.yaml", extends="study.yaml", fixed={"trainer.max_steps": 80}, seeds=[0, 1, 2])
    assert restatements(tidy) == []


def test_fixed_restating_a_base_config_is_named(specs):
    """configs/gpt/tiny.yaml sets lr 3e-3, batch 32 and 4 heads (as configs/gpt/base.yaml: the later file's)."""
    fixed = {"model.optim.lr": 0.003, "data.batch_size": 32, "model.arch.n_heads": 4, "trainer.max_steps": 40}
    spec = specs("study.yaml", base=BASE, fixed=fixed | {"model.init_args.optim.warmup_steps": 21}, cells=[{}])
    assert sorted(restatements(spec)) == [
        f"{spec}: fixed.data.batch_size: 32 is already set by configs/gpt/tiny.yaml (base)",
        f"{spec}: fixed.model.arch.n_heads: 4 is already set by configs/gpt/tiny.yaml (base)",
        f"{spec}: fixed.model.optim.lr: 0.003 is already set by configs/gpt/tiny.yaml (base)",
    ]
    # a variant that sets a base config's value back, over its parent's other value, restates nothing
    back = specs("study_back.yaml", extends="study.yaml", fixed={"model.init_args.optim.warmup_steps": 20})
    assert restatements(back) == []


def test_a_value_a_variant_with_other_base_configs_inherits_is_not_a_restatement(specs):
    """peft_gpt.yaml's shape: the GPT spec's warmup 20 is configs/gpt/tiny.yaml's, and the BERT variant
    (configs/bert/tiny.yaml: 30) takes it from there."""
    gpt = specs("ft_gpt.yaml", base=BASE, fixed={"model.optim.warmup_steps": 20}, cells=[{}])
    restated = f"{gpt}: fixed.model.optim.warmup_steps: 20 is already set by configs/gpt/tiny.yaml (base)"
    assert restatements(gpt) == [restated]
    bert = specs("ft_bert.yaml", extends="ft_gpt.yaml", base=["configs/bert/base.yaml", "configs/bert/tiny.yaml"])
    assert restatements(gpt, [gpt, bert]) == [] and restatements(bert, [gpt, bert]) == []
