"""Checksummed, atomic downloads and the data_dir / cache_dir lookup every DataModule shares."""

import hashlib
import os
import shutil
import urllib.request
from pathlib import Path

DEFAULT_CACHE_DIR = "~/.cache/transformer-ablations"


def sha256_file(path: str | Path, chunk_size: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks so large archives do not fill memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of in-memory data (generated or bundled datasets)."""
    return hashlib.sha256(data).hexdigest()


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def verify(path: str | Path, sha256: str | None) -> str:
    """Check a file against its expected SHA-256 and return the actual one.

    Args:
        path: the file to check.
        sha256: expected hex digest. ``None`` means the dataset has no published checksum: the
            digest recorded next to the file on first download (``<file>.sha256``) is used instead,
            and if there is none yet the file is accepted as is.

    Raises:
        ValueError: naming the file, the expected and the actual checksum.
    """
    path = Path(path)
    actual = sha256_file(path)
    if sha256 is None and _sidecar(path).exists():
        sha256 = _sidecar(path).read_text().strip()
    if sha256 is not None and actual != sha256.lower():
        raise ValueError(
            f"checksum mismatch for {path}: expected sha256 {sha256}, got {actual}; "
            "the file is corrupt or a different version: delete it to download it again"
        )
    return actual


def fetch(url: str, dest: str | Path, sha256: str | None) -> Path:
    """Download ``url`` to ``dest`` unless it is already there, verifying its SHA-256.

    The download goes to ``dest + '.part'`` and is renamed only after the checksum matches, so an
    interrupted or corrupt download is never mistaken for a valid file on the next run.

    Args:
        url: where the file lives (any scheme urllib reads, ``file://`` included).
        dest: final path of the file.
        sha256: expected hex digest, or ``None`` to record the digest of the first download in
            ``dest + '.sha256'`` and verify against it afterwards (trust on first use).

    Returns:
        ``dest`` as a Path.

    Raises:
        ValueError: the existing or the downloaded file does not match ``sha256``.
    """
    dest = Path(dest).expanduser()
    if dest.exists():
        verify(dest, sha256)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(part, "wb") as f:
            shutil.copyfileobj(response, f)
        actual = sha256_file(part)
        if sha256 is not None and actual != sha256.lower():
            raise ValueError(
                f"checksum mismatch for {dest} downloaded from {url}: expected sha256 {sha256}, got {actual}"
            )
        if sha256 is None:
            _sidecar(dest).write_text(actual + "\n")
        os.replace(part, dest)  # atomic on one filesystem: dest is either absent or complete
    finally:
        part.unlink(missing_ok=True)
    return dest


def resolve(
    name: str,
    filename: str,
    data_dir: str | None,
    cache_dir: str,
    url: str,
    sha256: str | None,
) -> Path:
    """Path of one dataset file: from ``data_dir`` if given, else downloaded into ``cache_dir``.

    Args:
        name: dataset name, used in messages and as the cache sub-folder.
        filename: the file's name inside ``data_dir`` (or the cache sub-folder).
        data_dir: a local copy of the dataset's files; nothing is downloaded when it is set.
        cache_dir: where downloads are kept, ``<cache_dir>/<name>/<filename>``.
        url: canonical download URL.
        sha256: expected hex digest (``None``: see :func:`fetch`).

    Raises:
        FileNotFoundError: ``data_dir`` is set but lacks the file; the message says how to get it.
        ValueError: checksum mismatch.
    """
    if data_dir is not None:
        path = Path(data_dir).expanduser() / filename
        if not path.exists():
            raise FileNotFoundError(
                f"{path} not found: dataset '{name}' needs {filename} in data_dir. Get it with "
                f"`curl -L -o {path} {url}`, or leave data_dir unset to download it into cache_dir."
            )
        verify(path, sha256)
        return path
    return fetch(url, Path(cache_dir).expanduser() / name / filename, sha256)
