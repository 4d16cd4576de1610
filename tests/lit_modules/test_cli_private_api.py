"""SuiteCLI overrides private LightningCLI methods: the installed Lightning must still have each with the
parameters its override was written for (`lit_modules.cli.PRIVATE_OVERRIDES`), or the test names the
method and the Lightning range requirements.txt pins."""

from __future__ import annotations

import inspect
import re
from importlib.metadata import version
from pathlib import Path

import pytest
from lightning.pytorch.cli import LightningCLI

from lit_modules.cli import PRIVATE_OVERRIDES, SuiteCLI

REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements.txt"


def lightning_pin() -> str:
    """requirements.txt's `lightning` line, without its comment."""
    lines = [line.split("#")[0].strip() for line in REQUIREMENTS.read_text().splitlines()]
    return next(line for line in lines if re.match(r"lightning\s*[<>=!~]", line))


def test_every_private_override_is_recorded():
    overridden = {name for name in vars(SuiteCLI) if name.startswith("_") and not name.startswith("__")}
    overridden &= set(dir(LightningCLI))
    assert overridden == set(PRIVATE_OVERRIDES), (
        f"SuiteCLI overrides the private LightningCLI methods {sorted(overridden)}, PRIVATE_OVERRIDES in "
        f"lit_modules/cli.py records {sorted(PRIVATE_OVERRIDES)}: record each override's parameters there"
    )


@pytest.mark.parametrize("name", sorted(PRIVATE_OVERRIDES))
def test_private_method_has_the_parameters_its_override_was_written_for(name):
    installed, pin = version("lightning"), lightning_pin()
    method = getattr(LightningCLI, name, None)
    assert method is not None, (
        f"LightningCLI.{name} does not exist in the installed lightning {installed}, and SuiteCLI overrides it "
        f"(lit_modules/cli.py): install the range requirements.txt pins ({pin}), or port the override"
    )
    found, expected = tuple(inspect.signature(method).parameters), PRIVATE_OVERRIDES[name]
    assert found == expected, (
        f"LightningCLI.{name} takes ({', '.join(found)}) in the installed lightning {installed}; SuiteCLI.{name} "
        f"(lit_modules/cli.py) was written for ({', '.join(expected)}): install the range requirements.txt pins "
        f"({pin}), or port the override and update PRIVATE_OVERRIDES and the pin"
    )
