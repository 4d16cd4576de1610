"""What the GPU machine needs carried to run the GPU check: it has its own `python3` (3.12, torch 2.11, Lightning,
...; `scripts/gpu_device/packages.txt`) and no network, so the packages it lacks travel as wheels
(`scripts/gpu_device/wheels.txt`) in `.wheels/gpu/`, which git ignores.

    python -m experiments.bench.device_wheels download   # `make gpu-wheels`: the pinned wheels, CPython 3.12 x86-64
    python -m experiments.bench.device_wheels check      # every import of the check: on that machine or carried
    python -m experiments.bench.device_wheels slim|full  # the studies' results out of / back into the working tree

Importing nothing beyond the standard library (and `packaging`, which pip brings), so `make gpu-wheels` needs
no torch. The import check follows the project's own imports statically, lazy ones inside functions included,
and any string naming a project module (a `python -m` child): a superset of what the check imports, so a wheel
missing on that machine is found here, not there.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import importlib.metadata
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEVICE_DIR = ROOT / "scripts" / "gpu_device"
PACKAGES = DEVICE_DIR / "packages.txt"
PINS = DEVICE_DIR / "wheels.txt"
WHEELS = ROOT / ".wheels" / "gpu"
STAMP = WHEELS / ".pins"  # the pins the folder was downloaded for: a changed wheels.txt downloads again
# what the GPU check reaches: the check itself, and `cli.py` that its ladder part runs (`cli.py sweep` and its fits)
ENTRIES = (ROOT / "experiments" / "bench" / "gpu_check.py", ROOT / "cli.py")
PROJECT = ("cli", "contract", "models", "datamodules", "lit_modules", "experiments", "tools")
PYTHON = "3.12"  # the GPU machine's, for pip's choice of wheels
# pip matches a manylinux tag exactly: these cover the x86-64 wheels PyPI publishes
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")  # fmt: skip
# the extras the suite asks for (requirements.txt), whose requirements must travel too
EXTRAS = {"jsonargparse": {"signatures", "typing-extensions"}}
TRAVEL_LIMIT_MIB = 64  # the device tool's limit on the working tree it sends, wheels included
STUDY_RESULTS = "experiments/studies/*/results/"


def canonical(name: str) -> str:
    """A distribution's name as PyPI compares them (PEP 503)."""
    return name.lower().replace("_", "-").replace(".", "-")


def device_packages(path: Path = PACKAGES) -> dict[str, str | None]:
    """{distribution: version or None where unknown} installed on the GPU machine."""
    out: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition(" ")
            out[canonical(name)] = version.strip() or None
    return out


def pins(path: Path = PINS) -> dict[str, str]:
    """{distribution: pinned version} of the wheels to carry."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[canonical(name)] = version.strip()
    return out


def pip_flags() -> list[str]:
    """pip's flags choosing the GPU machine's wheels (binary only: nothing is built there)."""
    flags = ["--only-binary=:all:", "--python-version", PYTHON, "--implementation", "cp"]
    return flags + [f for p in PLATFORMS for f in ("--platform", p)]


def download(dest: Path = WHEELS) -> list[Path]:
    """The pinned wheels in `dest` (downloaded again only when wheels.txt changed). Raises RuntimeError with
    pip's last lines when the registry cannot be reached or a pin has no wheel for that machine."""
    wanted = PINS.read_text()
    if (dest / STAMP.name).exists() and (dest / STAMP.name).read_text() == wanted:
        return wheel_files(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):  # one version of each: two stop the install there
        old.unlink()
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check",
               *pip_flags(), "-d", str(dest), "-r", str(PINS)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"pip download of {PINS.relative_to(ROOT)} failed ({done.returncode}): {tail}")
    (dest / STAMP.name).write_text(wanted)
    return wheel_files(dest)


def wheel_files(folder: Path = WHEELS) -> list[Path]:
    return sorted(folder.glob("*.whl"))


def wheel_name(wheel: Path) -> str:
    return canonical(wheel.name.split("-", 1)[0])


@dataclass(frozen=True)
class Requirement:
    wheel: str
    text: str  # as Requires-Dist writes it


def wheel_requirements(wheel: Path) -> list[Requirement]:
    """The requirements a wheel declares that the suite's use of it needs (its extras in EXTRAS included)."""
    from packaging.requirements import Requirement as Parsed

    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    name, out = wheel_name(wheel), []
    for line in lines:
        if line.startswith("Requires-Dist:"):
            req = Parsed(line.split(":", 1)[1].strip())
            env = {"python_version": PYTHON, "sys_platform": "linux", "platform_system": "Linux"}
            if req.marker is None or any(req.marker.evaluate(env | {"extra": e}) for e in EXTRAS.get(name, {""})):
                out.append(Requirement(name, str(req)))
    return out


def unmet(requirements: list[Requirement], have: dict[str, str | None]) -> list[str]:
    """Each requirement that no distribution in `have` meets (by name, and by version where it is known)."""
    from packaging.requirements import Requirement as Parsed

    missing = []
    for r in requirements:
        req = Parsed(r.text)
        version = have.get(canonical(req.name), "absent")
        if version == "absent" or (version and req.specifier and not req.specifier.contains(version, prereleases=True)):
            missing.append(f"{r.wheel} needs {r.text}; the machine and the wheels have {version}")
    return missing


def project_file(module: str) -> Path | None:
    """The file of a project module (package → its __init__.py), or None."""
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path) -> set[str]:
    """Every module a file names: imports at any depth (lazy ones too) and strings that name a project module."""
    tree, package = ast.parse(path.read_text()), module_of(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names |= {base} | {f"{base}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.split(".")[0] in PROJECT:
            names.add(node.value)
    return names


def third_party_imports(entries: tuple[Path, ...] = ENTRIES) -> dict[str, set[str]]:
    """{top-level third-party module: the project files importing it}, following project imports from `entries`."""
    seen: set[Path] = set()
    todo, found = list(entries), {}
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in imported_names(path):
            top = name.split(".")[0]
            if top in PROJECT:
                parts = name.split(".")  # each package on the way is imported too
                todo += [f for i in range(1, len(parts) + 1) if (f := project_file(".".join(parts[:i])))]
            elif top and top not in sys.stdlib_module_names and top != "__future__":
                found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def distributions(modules: dict[str, set[str]]) -> tuple[dict[str, set[str]], list[str]]:
    """({distribution: the modules it provides that are imported}, modules no installed distribution provides)."""
    provided = importlib.metadata.packages_distributions()
    out: dict[str, set[str]] = {}
    unknown = []
    for module in modules:
        names = provided.get(module)
        if not names:
            unknown.append(module)
        for dist in names or ():
            out.setdefault(canonical(dist), set()).add(module)
    return out, sorted(unknown)


def coverage_problems(wheels: list[Path]) -> list[str]:
    """What the GPU machine would lack: imports of the check that neither it nor the wheels provide, wheel
    requirements they do not meet, pins without a wheel. Empty when the check can run there."""
    have = device_packages()
    carried = {wheel_name(w): w.name.split("-")[1] for w in wheels}
    modules = third_party_imports()
    dists, unknown = distributions(modules)
    problems = [f"`import {m}` ({', '.join(sorted(modules[m]))}) is from no installed distribution" for m in unknown]
    for dist, provides in sorted(dists.items()):
        if dist not in have and dist not in carried:
            files = sorted({f for m in provides for f in modules[m]})
            problems.append(f"{dist} (imported as {', '.join(sorted(provides))} in {', '.join(files[:3])}) is "
                            f"neither on the GPU machine ({PACKAGES.name}) nor in {PINS.name}")  # fmt: skip
    problems += unmet([r for w in wheels for r in wheel_requirements(w)], have | carried)
    problems += [f"{name}=={v} is pinned in {PINS.name} but has no wheel in {WHEELS}" for name, v in pins().items()
                 if name not in carried]  # fmt: skip
    return problems


def travelling_mib(wheels: list[Path], slim: bool = False) -> float:
    """MiB of what a device call sends: the tracked and untracked-not-ignored files on disk (without the studies'
    results when `slim`, as `slim_tree` leaves them), and the wheels."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")  # fmt: skip
    kept = [f for f in listed if f and not (slim and fnmatch.fnmatch(f, STUDY_RESULTS + "*"))]
    files = [ROOT / f for f in kept if (ROOT / f).is_file()]
    return (sum(f.stat().st_size for f in files) + sum(w.stat().st_size for w in wheels)) / 2**20


def slim_tree(slim: bool) -> None:
    """The studies' committed results (about 100 MiB of TensorBoard events, plots and run records, more than a
    device call carries, and nothing the GPU check reads) out of the working tree, by git's sparse checkout,
    before a device call; `slim=False` brings them back. The index and history are untouched."""
    command = ["sparse-checkout", "set", "--no-cone", "/*", f"!/{STUDY_RESULTS}"] if slim else ["sparse-checkout",
                                                                                                 "disable"]  # fmt: skip
    subprocess.run(["git", *command], cwd=ROOT, check=True)


def main(argv: list[str] | None = None) -> int:
    prog = "python -m experiments.bench.device_wheels"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("download", "check", "slim", "full"),
                        help="download the wheels; check the imports against them; slim / full: leave the studies' "
                        "results out of the working tree before a device call / bring them back")  # fmt: skip
    args = parser.parse_args(argv)
    if args.action in ("slim", "full"):
        slim_tree(args.action == "slim")
    try:
        wheels = download()
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    size = sum(w.stat().st_size for w in wheels) / 2**20
    print(f"{len(wheels)} wheels, {size:.1f} MiB, in {WHEELS.relative_to(ROOT)}/")
    travelling = travelling_mib(wheels)
    print(f"a device call from this checkout would carry {travelling:.1f} MiB (limit {TRAVEL_LIMIT_MIB})"
          + ("" if travelling <= TRAVEL_LIMIT_MIB else ": run `make gpu-tree-slim` first"))  # fmt: skip
    if args.action == "check":
        problems = coverage_problems(wheels)
        print("\n".join(problems) or "every import of the GPU check is on the GPU machine or carried")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
