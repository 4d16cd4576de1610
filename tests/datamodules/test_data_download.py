import hashlib
from pathlib import Path

import pytest

from datamodules.download import fetch, resolve, sha256_file


@pytest.fixture
def source(tmp_path: Path) -> tuple[str, str]:
    """A file:// URL to a small file and its sha256 (no network in tests)."""
    src = tmp_path / "src" / "data.txt"
    src.parent.mkdir()
    src.write_bytes(b"hello data\n" * 100)
    return src.as_uri(), hashlib.sha256(src.read_bytes()).hexdigest()


def test_fetch_downloads_and_verifies(tmp_path: Path, source: tuple[str, str]) -> None:
    url, sha = source
    dest = tmp_path / "cache" / "ds" / "data.txt"
    assert fetch(url, dest, sha) == dest
    assert sha256_file(dest) == sha
    assert not dest.with_name("data.txt.part").exists()
    assert fetch("file:///nonexistent", dest, sha) == dest  # present and valid: no download attempted


def test_fetch_mismatch_names_both_checksums_and_leaves_nothing(tmp_path: Path, source: tuple[str, str]) -> None:
    url, sha = source
    dest = tmp_path / "cache" / "data.txt"
    wrong = "0" * 64
    with pytest.raises(ValueError) as e:
        fetch(url, dest, wrong)
    assert wrong in str(e.value) and sha in str(e.value) and str(dest) in str(e.value)
    assert list(dest.parent.iterdir()) == []  # neither dest nor dest.part


def test_fetch_existing_corrupt_file_raises(tmp_path: Path, source: tuple[str, str]) -> None:
    url, sha = source
    dest = tmp_path / "data.txt"
    dest.write_text("tampered")
    with pytest.raises(ValueError, match=sha):
        fetch(url, dest, sha)


def test_fetch_without_checksum_records_then_verifies(tmp_path: Path, source: tuple[str, str]) -> None:
    url, sha = source
    dest = tmp_path / "data.txt"
    fetch(url, dest, None)
    assert (tmp_path / "data.txt.sha256").read_text().strip() == sha
    dest.write_text("changed later")
    with pytest.raises(ValueError, match=sha):
        fetch(url, dest, None)


def test_resolve_missing_data_dir_file_names_path_dataset_and_url(tmp_path: Path) -> None:
    url = "https://example.org/data.txt"
    with pytest.raises(FileNotFoundError) as e:
        resolve("myset", "data.txt", str(tmp_path), str(tmp_path / "cache"), url, None)
    msg = str(e.value)
    assert str(tmp_path / "data.txt") in msg and "myset" in msg and url in msg
    assert not (tmp_path / "cache").exists()  # data_dir given: never downloads


def test_resolve_downloads_into_cache(tmp_path: Path, source: tuple[str, str]) -> None:
    url, sha = source
    path = resolve("myset", "data.txt", None, str(tmp_path / "cache"), url, sha)
    assert path == tmp_path / "cache" / "myset" / "data.txt" and sha256_file(path) == sha
