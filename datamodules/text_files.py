"""A user's own text corpus: paths or globs of plain text, JSON Lines, Parquet or a Hugging Face dataset saved
to disk, read as a stream of records so that no corpus is ever held in memory whole.

Readers: plain text and JSON Lines by the standard library line by line (streamed, and an error can name the
line); Parquet by pyarrow in record batches; a folder written by ``datasets.Dataset.save_to_disk`` by
``datasets.load_from_disk`` (Arrow memory maps). A record is one line of a text file (newline kept, so the
files' text is reproduced exactly) or one document of the others (its text, a newline appended when it has none).
"""

import glob
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from datamodules.download import sha256_file

TEXT_FIELD = "text"  # the field (JSON Lines) or column (Parquet, saved datasets) that holds a document
FORMATS = {".txt": "text", ".text": "text", ".md": "text", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}
HF_DATASET_MARKER = "dataset_info.json"  # what `save_to_disk` writes beside its Arrow files


@dataclass(frozen=True)
class Source:
    """One file (or saved dataset folder) of a split, its format and SHA-256."""

    path: Path
    format: str
    sha256: str
    text_bytes: int  # about how many bytes of text it holds (where the store cuts a held-out part)


def _format(path: Path) -> str:
    if path.is_dir():
        if (path / HF_DATASET_MARKER).is_file():
            return "hf_dataset"
        raise ValueError(
            f"{path} is a folder but not a dataset saved by `datasets` (no {HF_DATASET_MARKER}); "
            f"give its files as a glob instead, e.g. '{path}/*.txt'"
        )
    return FORMATS.get(path.suffix.lower(), "text")  # any other suffix (or none) is read as plain text


def _text_bytes(path: Path, format: str) -> int:
    if format == "parquet":  # the text column's uncompressed size
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(path).metadata
        return sum(meta.row_group(g).total_byte_size for g in range(meta.num_row_groups))
    if format == "hf_dataset":
        return sum(p.stat().st_size for p in path.glob("*.arrow"))
    return path.stat().st_size


def _checksum(path: Path, format: str) -> str:
    if format != "hf_dataset":
        return sha256_file(path)
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return sha256_file_list(files, path)


def sha256_file_list(files: list[Path], root: Path) -> str:
    """One SHA-256 over several files' names (relative to ``root``) and contents."""
    digest = hashlib.sha256()
    for f in files:
        digest.update(f"{f.relative_to(root)}\0{sha256_file(f)}\n".encode())
    return digest.hexdigest()


def sources(patterns: str | list[str], split: str) -> list[Source]:
    """The files of ``split`` named by ``patterns`` (paths or globs), in the order given (each glob sorted).

    Raises:
        FileNotFoundError: a path that does not exist or a glob matching nothing.
        ValueError: an empty file, or a folder that is not a saved dataset.
    """
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    if not patterns:
        raise ValueError(f"data.{split}_files is empty; give at least one path or glob of the {split} text")
    found: list[Source] = []
    for pattern in patterns:
        if glob.has_magic(pattern):
            paths = sorted(Path(p) for p in glob.glob(pattern, recursive=True))
            if not paths:
                raise FileNotFoundError(f"data.{split}_files: the glob {pattern!r} matches no file; check the path")
        else:
            paths = [Path(pattern)]
            if not paths[0].exists():
                raise FileNotFoundError(f"data.{split}_files: {pattern} does not exist; check the path")
        for path in paths:
            format = _format(path)
            if format != "hf_dataset" and path.stat().st_size == 0:
                raise ValueError(f"data.{split}_files: {path} is empty; remove it from the list or fill it")
            found.append(Source(path, format, _checksum(path, format), _text_bytes(path, format)))
    return found


def _newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def _jsonl(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as e:
                raise ValueError(f"{path}:{number} is not valid JSON ({e}); fix or remove that line") from e
            if not isinstance(record, dict) or not isinstance(record.get(TEXT_FIELD), str):
                raise ValueError(
                    f"{path}:{number} has no string {TEXT_FIELD!r} field; every JSON line needs one "
                    f'(e.g. {{"{TEXT_FIELD}": "..."}})'
                )
            yield _newline(record[TEXT_FIELD])


def _text(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8", newline="") as f:
        yield from f


def _column(path: Path, names: list[str]) -> None:
    if TEXT_FIELD not in names:
        raise ValueError(f"{path} has no {TEXT_FIELD!r} column (it has {names}); rename the text column to it")


def _parquet(path: Path) -> Iterator[str]:
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path)
    _column(path, table.schema_arrow.names)
    for batch in table.iter_batches(columns=[TEXT_FIELD], batch_size=1024):
        yield from (_newline(t) for t in batch.column(0).to_pylist() if t)


def _hf_dataset(path: Path) -> Iterator[str]:
    from datasets import load_from_disk

    dataset = load_from_disk(str(path))
    if hasattr(dataset, "keys"):  # a DatasetDict: the user names one split's folder
        raise ValueError(f"{path} holds several splits {list(dataset.keys())}; give one of their folders")
    _column(path, dataset.column_names)
    for batch in dataset.iter(batch_size=1024):
        yield from (_newline(t) for t in batch[TEXT_FIELD] if t)


READERS = {"text": _text, "jsonl": _jsonl, "parquet": _parquet, "hf_dataset": _hf_dataset}


def records(files: list[Source]) -> Iterator[str]:
    """Every record of ``files``, in order."""
    for source in files:
        yield from READERS[source.format](source.path)
