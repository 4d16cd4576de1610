"""A disk that fills up, for the tests (`tests/test_full_disk.py`): every file opened for writing under a folder is
on it, and once it is full (from a write to a path holding `after`, or one of more than `larger_than` bytes) every
write there fails as a full disk's does (OSError ENOSPC naming no file) and its free space reads 0, until the state
file is removed (space freed). Installed in this process (`install`), or, through the environment
(`environment`), in every Python process a command starts: `full_disk_site/sitecustomize.py` installs it at startup,
and the state file is what they share."""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

VAR = "SUITE_TEST_FULL_DISK"
SITE = Path(__file__).resolve().parent / "full_disk_site"
_open, _disk_usage = io.open, shutil.disk_usage


class Disk:
    """The folder on the disk, the state file that says it is full, and what fills it."""

    def __init__(self, folder: str | Path, state: str | Path, after: str | None = None, larger_than: int | None = None):
        self.folder, self.state = os.path.abspath(folder), Path(state)
        self.after, self.larger_than = after, larger_than

    def holds(self, path: str) -> bool:
        return os.path.abspath(path).startswith(self.folder + os.sep)

    def fills(self, path: str, size: int) -> bool:
        """A write of `size` bytes to `path` (on the disk) finds it full; the write that fills it marks it so."""
        if self.state.exists():
            return True
        if (self.after is not None and self.after in path) or (
            self.larger_than is not None and size > self.larger_than
        ):
            self.state.touch()
            return True
        return False

    def settings(self) -> dict:
        return {"folder": self.folder, "state": str(self.state), "after": self.after, "larger_than": self.larger_than}


class _OnDisk:
    """A file opened for writing on the disk: its writes pass while there is space."""

    def __init__(self, file, path: str, disk: Disk):
        self._file, self._path, self._disk = file, path, disk

    def write(self, data):
        if self._disk.fills(self._path, len(data)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self._file.write(data)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._file.__exit__(*exc)

    def __iter__(self):
        return iter(self._file)

    def __getattr__(self, name: str):
        return getattr(self._file, name)


def install(disk: Disk) -> Callable[[], None]:
    """Puts `disk` under this process's `open` and `shutil.disk_usage`; returns what undoes it."""

    def opened(file, mode="r", *args, **kwargs):
        handle = _open(file, mode, *args, **kwargs)
        if isinstance(file, int) or not any(c in mode for c in "wax+") or not disk.holds(os.fsdecode(file)):
            return handle
        return _OnDisk(handle, os.path.abspath(os.fsdecode(file)), disk)

    def disk_usage(path):
        usage = _disk_usage(path)
        full = disk.holds(os.path.join(os.fsdecode(path), "x")) and disk.state.exists()
        return usage._replace(free=0) if full else usage

    io.open = builtins.open = opened
    shutil.disk_usage = disk_usage

    def undo() -> None:
        io.open = builtins.open = _open
        shutil.disk_usage = _disk_usage

    return undo


def environment(disk: Disk, root: Path) -> dict[str, str]:
    """The environment variables that install `disk` in every Python process started with them (`root`: the
    repository, on the path so that the startup hook finds this module)."""
    path = os.pathsep.join(p for p in (str(SITE), str(root), os.environ.get("PYTHONPATH", "")) if p)
    return {VAR: json.dumps(disk.settings()), "PYTHONPATH": path}


def install_from_environment() -> None:
    if settings := os.environ.get(VAR):
        install(Disk(**json.loads(settings)))
