"""A write that fails for lack of space (ENOSPC; EDQUOT, a quota), said in one line: the path, the free space there
and what to do. Every command's top (`cli.py`) and the sweep say it so instead of a traceback; the writers that
know their file name it (`writing`), since a failed `write()` names none."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# how a one-line report of a full disk reads (ENOSPC's and EDQUOT's strerror), so the sweep recognises a run's
MARKS = (os.strerror(errno.ENOSPC).lower(), os.strerror(errno.EDQUOT).lower())
AGAIN = "run the same command again"


class DiskFull(OSError):
    """A full disk, with its one line (`str`) already said: `disk_full_line`'s, or the sweep's own."""

    def __init__(self, path: str | Path, line: str):
        super().__init__(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        self.line = line

    def __str__(self) -> str:
        return self.line


def disk_full(err: BaseException | None) -> OSError | None:
    """The OSError of a full disk in `err` or the exceptions it was raised from or while handling; None if none."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in FULL_ERRNOS:
            return err
        err = err.__cause__ or err.__context__
    return None


def says_disk_full(text: str) -> bool:
    """`text` (a run's error line, an exception's message) reports a full disk."""
    return any(mark in text.lower() for mark in MARKS)


def free_space(path: str | Path) -> str:
    """The free space on the filesystem holding `path` (or its nearest existing parent), e.g. `0 B`, `12.3 MB`."""
    here = Path(path).absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        free = float(shutil.disk_usage(here).free)
    except OSError:
        return "unknown space"
    for unit in ("B", "kB", "MB", "GB"):
        if free < 1000:
            return f"{free:.0f} {unit}" if unit == "B" else f"{free:.1f} {unit}"
        free /= 1000
    return f"{free:.1f} TB"


def written_path(err: OSError, fallback: str | Path | None = None) -> str:
    """The file a failed write was writing: a move's target, else the file, else `fallback` (else the working
    directory, whose disk is the likeliest)."""
    for name in (err.filename2, err.filename):
        if isinstance(name, (str, bytes, os.PathLike)):
            return os.fsdecode(name)
    return str(fallback or Path.cwd())


def disk_full_line(err: OSError, fallback: str | Path | None = None, then: str = AGAIN) -> str:
    """The one line of a full disk: `error: no space left on device writing PATH (FREE free there): free space on
    that disk, or write elsewhere, and THEN`."""
    if isinstance(err, DiskFull):
        return err.line
    path = written_path(err, fallback)
    what = (err.strerror or os.strerror(err.errno or errno.ENOSPC)).lower()
    return (
        f"error: {what} writing {path} ({free_space(path)} free there): free space on that disk, or write "
        f"elsewhere, and {then}"
    )


@contextlib.contextmanager
def writing(path: str | Path, instead: bool = False) -> Iterator[None]:
    """Names `path` in a full disk's OSError raised inside that names no file (what `write()` raises), or, with
    `instead`, in place of the file it names (a temporary one, gone with the failed write)."""
    try:
        yield
    except OSError as err:
        if err.errno in FULL_ERRNOS and (instead or err.filename is None):
            raise OSError(err.errno, err.strerror, str(path)) from err
        raise
