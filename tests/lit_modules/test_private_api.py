"""Every private name of Lightning, jsonargparse and argparse the suite touches is listed in
`lit_modules.private_api`, and the installed libraries still have each (an overridden method with the
parameters its override was written for); otherwise the test names the entry and the Lightning pin."""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import pkgutil
import re
from collections import defaultdict
from importlib.metadata import version
from pathlib import Path

import lightning.pytorch as pl
import pytest

from lit_modules.private_api import PRIVATE_NAMES, PRIVATE_OVERRIDES, PrivateName
from lit_modules.suite_cli import SuiteCLI, cli_main

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "requirements.txt"
FIRST_PARTY = ("contract", "models", "datamodules", "lit_modules", "experiments", "tools")
LIBRARIES = ("lightning", "pytorch_lightning", "torchmetrics", "jsonargparse", "argparse")  # the table's
# other libraries' private names the code touches: not the table's (torch's and the standard library's)
OTHER_LIBRARIES = {
    "_dynamo": "torch._dynamo: a compiled model's class; the benchmark's cache reset",
    "_orig_mod": "torch.compile's wrapped module",
    "_exit": "os._exit",
    "_shutdown": "threading._shutdown: a warm child exits as CPython does",
    "_run_exitfuncs": "atexit._run_exitfuncs: the same",
    "_valid_parameters": "submitit.SlurmExecutor._valid_parameters: the sbatch options it writes",
    "_attn_implementation": "transformers' config: the benchmark's reference model on SDPA",
    "_scaled_dot_product_flash_attention_for_cpu": "torch.ops.aten: SDPA's fused CPU kernel, which returns the "
    "log-sum-exp that causal T5's split merges by (models/far_bias.py)",
    "_scaled_dot_product_flash_attention_for_cpu_backward": "torch.ops.aten: that kernel's backward, given the "
    "merged output and log-sum-exp",
    "_local_tensor": "torch.distributed.tensor.DTensor: a rank's own shard (the sharding bench's bytes per rank)",
}


class _Parsed(Exception):
    pass


def parsed_cli() -> SuiteCLI:
    """The suite's CLI after parsing a fit command (where LightningCLI keeps its subcommand parsers), stopped
    before anything is built."""
    seen: list[SuiteCLI] = []

    class Parsed(SuiteCLI):
        def before_instantiate_classes(self) -> None:
            seen.append(self)
            raise _Parsed

    with pytest.raises(_Parsed):
        cli_main(["fit", "-c", str(ROOT / "configs/gpt/base.yaml")], cli_class=Parsed)
    return seen[0]


# how to make an object that holds an owner's instance attributes (set in its __init__ or while it runs)
INSTANCES = {
    "argparse.ArgumentParser": argparse.ArgumentParser,
    "lightning.pytorch.LightningModule": pl.LightningModule,
    "lightning.pytorch.callbacks.ModelCheckpoint": pl.callbacks.ModelCheckpoint,
    "lightning.pytorch.cli.LightningCLI": parsed_cli,
}


def owner_class(entry: PrivateName) -> type:
    module, _, name = entry.owner.rpartition(".")
    return getattr(importlib.import_module(module), name)


def pin() -> str:
    lines = [line.split("#")[0].strip() for line in REQUIREMENTS.read_text().splitlines()]
    return next(line for line in lines if re.match(r"lightning\s*[<>=!~]", line))


@pytest.mark.parametrize("entry", PRIVATE_NAMES, ids=lambda e: f"{e.owner}.{e.name}")
def test_the_installed_library_has_each_private_name(entry):
    library = entry.owner.split(".")[0]
    installed = f"{library} {version(library)}" if library != "argparse" else "the standard library's argparse"
    where = f"{entry.owner}.{entry.name} (used by {entry.used_by}; lit_modules/private_api.py)"
    fix = f"install the range requirements.txt pins ({pin()}), or port the code and update the table"
    cls = owner_class(entry)
    if entry.parameters is not None:
        method = getattr(cls, entry.name, None)
        assert method is not None, f"{where} is missing from the installed {installed}: {fix}"
        found = tuple(inspect.signature(method).parameters)
        assert found == entry.parameters, (
            f"{where} takes ({', '.join(found)}) in the installed {installed}; the override was written for "
            f"({', '.join(entry.parameters)}): {fix}"
        )
        return
    if hasattr(cls, entry.name):
        return
    assert entry.owner in INSTANCES, f"no way to make a {entry.owner} to look for {entry.name}: add one to INSTANCES"
    assert hasattr(INSTANCES[entry.owner](), entry.name), f"{where} is missing from the installed {installed}: {fix}"


def suite_classes():
    for package in ("lit_modules", "datamodules"):
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}."):
            module = importlib.import_module(info.name)
            yield from (c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__)


def test_every_private_override_is_listed():
    """A method of a suite class that overrides a private one of the libraries is in the table, with its owner."""
    found = set()
    for cls in suite_classes():
        for name, value in vars(cls).items():
            if not (name.startswith("_") and not name.startswith("__") and inspect.isfunction(value)):
                continue
            for base in cls.__mro__[1:]:
                if base.__module__.split(".")[0] in LIBRARIES and name in vars(base):
                    found.add((base, name))
                    break
    listed = {(owner_class(e), e.name) for e in PRIVATE_NAMES if e.parameters is not None}
    assert {(b.__name__, n) for b, n in found} == {(b.__name__, n) for b, n in listed}, (
        "the suite's overrides of private library methods and lit_modules/private_api.py's differ: "
        f"overridden {sorted((b.__name__, n) for b, n in found)}, listed {sorted((b.__name__, n) for b, n in listed)}"
    )
    assert set(PRIVATE_OVERRIDES) == {n for _, n in listed}


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def getattr_name(node: ast.AST) -> str:
    """`_name` of `getattr(x, "_name", ...)` or `hasattr(x, "_name")`; '' for any other node."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
        if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            return node.args[1].value
    return ""


def touched_private_names() -> dict[str, list[str]]:
    """Private names the first-party code reads or calls (`x._name`, `getattr(x, "_name")`) but never defines
    (a def or class of that name, `self._name = ...`): another library's -> where."""
    defined, used = set(), defaultdict(list)
    files = [p for package in FIRST_PARTY for p in (ROOT / package).rglob("*.py")] + [ROOT / "cli.py"]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and private(node.name):
                defined.add(node.name)
            elif isinstance(node, ast.Attribute) and private(node.attr):
                own = isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) and node.value.id in (
                    "self", "cls")  # fmt: skip
                (defined.add(node.attr) if own else used[node.attr].append(where))
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and private(node.id):
                defined.add(node.id)
            elif private(looked_up := getattr_name(node)):
                used[looked_up].append(where)
    return {name: places for name, places in used.items() if name not in defined}


def test_every_private_name_the_code_touches_is_listed():
    touched = touched_private_names()
    listed = {e.name for e in PRIVATE_NAMES if e.parameters is None}
    unlisted = {name: places[:3] for name, places in touched.items() if name not in listed | set(OTHER_LIBRARIES)}
    assert not unlisted, (
        f"the code touches private names no table lists: {unlisted}; add Lightning's, jsonargparse's and "
        "argparse's to lit_modules/private_api.py, other libraries' to OTHER_LIBRARIES here"
    )
    stale = sorted((listed | set(OTHER_LIBRARIES)) - set(touched))
    assert not stale, f"listed private names the code no longer touches: {stale}; remove them"
