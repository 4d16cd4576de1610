"""Atomic file writes: a reader (the sweep, a resumed run, a killed process's successor) sees either
the old file or the new one, whole, never a half-written one."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from contract.disk import writing


def write_atomic(path: Path, content: str | bytes) -> None:
    """Writes `content` (text or bytes) to a hidden temporary file beside `path`, then renames it over
    `path` (`os.replace` is atomic within one filesystem). A write that fails (a full disk: the error names
    `path`) leaves `path` as it was and removes its temporary file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # unique per writer
    try:
        with writing(path):
            if isinstance(content, bytes):
                tmp.write_bytes(content)
            else:
                tmp.write_text(content)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, default=str))
