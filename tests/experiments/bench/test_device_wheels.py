"""The lent GPU machine runs the check on its own python3 with carried wheels: here, installing nothing on that
machine, every import the check can reach is found there or among the wheels, and the wheels install offline
into an empty folder. The download needs PyPI: without it these tests skip and say why."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from experiments.bench import device_wheels as dw


@pytest.fixture(scope="module")
def wheels():
    try:
        return dw.download()
    except RuntimeError as err:  # no registry reachable: nothing can be checked
        pytest.skip(f"the GPU machine's wheels cannot be downloaded here: {err}")


def test_every_import_of_the_check_is_on_the_gpu_machine_or_carried(wheels):
    assert dw.coverage_problems(wheels) == []


def test_a_wheel_left_out_is_found_here(wheels):
    without = [w for w in wheels if dw.wheel_name(w) != "jsonargparse"]
    problems = dw.coverage_problems(without)
    assert any(p.startswith("jsonargparse (imported as jsonargparse") for p in problems)
    assert any("jsonargparse==4.53.0 is pinned" in p for p in problems)


def test_the_imports_are_followed_into_functions_and_python_m_children():
    found = dw.third_party_imports()
    assert "submitit" in found  # imported inside the launchers' functions only
    assert any(f.startswith("experiments/sweep/launchers/") for f in found["submitit"])
    assert {"torch", "lightning", "jsonargparse", "yaml"} <= set(found)
    assert "os" not in found and "experiments" not in found  # the standard library and the project are not counted


def test_the_wheels_install_offline_into_an_empty_folder(wheels, tmp_path):
    site = tmp_path / "site"
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
               "--disable-pip-version-check", "--python-version", dw.PYTHON, "--only-binary=:all:",
               "--target", str(site), *map(str, wheels)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert {"jsonargparse", "submitit", "datasets", "docstring_parser", "typeshed_client"} <= {
        p.name for p in site.iterdir()
    }


def test_a_wheels_extras_and_version_bounds_are_checked(wheels):
    jsonargparse = next(w for w in wheels if dw.wheel_name(w) == "jsonargparse")
    needs = {r.text.split(">")[0].split("<")[0].split("=")[0] for r in dw.wheel_requirements(jsonargparse)}
    assert {"docstring-parser", "typeshed-client"} <= needs  # jsonargparse[signatures], as requirements.txt asks
    too_new = [dw.Requirement("datasets", "numpy>=99")]
    assert dw.unmet(too_new, {"numpy": "2.5.2"}) == ["datasets needs numpy>=99; the machine and the wheels have 2.5.2"]
    assert dw.unmet(too_new, {"numpy": None}) == []  # a version nobody read is not held against it
    assert dw.unmet([dw.Requirement("x", "absent-pkg")], {}) != []


def test_the_slim_tree_and_the_wheels_fit_one_device_call(wheels):
    assert dw.travelling_mib(wheels, slim=True) < dw.TRAVEL_LIMIT_MIB
    assert dw.travelling_mib(wheels, slim=True) < dw.travelling_mib(wheels)


def test_the_device_script_installs_the_wheels_and_runs_the_check(wheels, tmp_path):
    env = os.environ | {"DRY": "1", "PYTHON": sys.executable}
    script = dw.ROOT / "scripts" / "gpu_check_device.sh"
    done = subprocess.run([str(script), str(tmp_path), "--parts", "kv_cache"], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"wheels: {len(wheels)} installed" in done.stdout and "versions: python" in done.stdout
    assert "jsonargparse 4.53.0" in done.stdout
    assert (tmp_path / "gpu_check-dry.json").exists() and (tmp_path / "gpu_check-dry.md").exists()
