"""A corpus tokenized once: a folder of flat token files (``train.bin``, ``val.bin``, ``test.bin``: uint16 or
uint32 ids, nanoGPT's format) with a manifest (source checksums, tokenizer fingerprint, token counts) and the
tokenizer, reused by every run and every process with the same corpus and tokenizer.

Written by hand rather than with litdata (litgpt's chunked token streams): a run's windows here are a pure
function of (seed, sample index) drawn anywhere in one flat array (`text.RandomWindows`), which is what makes
the batch at every step the same on 1 or N processes, with 0 or N loader workers and after a resume; litdata's
streaming dataset shuffles its chunks by (seed, epoch) per rank and worker, an order that depends on both.
"""

import fcntl
import hashlib
import json
import logging
import multiprocessing
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from contract.disk import writing
from contract.files import write_json_atomic
from datamodules.text_files import Source, records
from datamodules.tokenization import BPETokenizer, Tokenizer, tokenizer_from_dict

log = logging.getLogger(__name__)

STORE_VERSION = 1
MANIFEST = "manifest.json"
TOKENIZER = "tokenizer.json"
CHUNK_CHARS = 1 << 20  # records are tokenized in chunks of about this much text: memory stays bounded
HELD_OUT_FRACTION = 0.1  # without validation files, the training tokens' last tenth (as built-in corpora)


def fingerprint(tokenizer: Tokenizer) -> str:
    """SHA-256 of the tokenizer's saved form: two stores share ids only if this matches."""
    return hashlib.sha256(json.dumps(tokenizer.to_dict(), sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class TokenArray:
    """Token ids ``[start, start + length)`` of a flat file, read window by window with ``np.fromfile``.

    Only the windows asked for are ever in memory: not a memory map, whose pages would count in the process's
    resident memory as random windows touch the whole corpus. Pickles as its path, so every loader worker and
    process reads its own.
    """

    path: str
    dtype: str
    start: int
    length: int

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: slice) -> Tensor:
        begin, end, step = index.indices(self.length)
        assert step == 1, "a TokenArray reads contiguous windows"
        count = max(0, end - begin)
        itemsize = np.dtype(self.dtype).itemsize
        ids = np.fromfile(self.path, dtype=self.dtype, count=count, offset=(self.start + begin) * itemsize)
        return torch.from_numpy(ids.astype(np.int64))

    def part(self, begin: int, end: int) -> "TokenArray":
        """The sub-array ``[begin, end)``."""
        return TokenArray(self.path, self.dtype, self.start + begin, end - begin)


@dataclass(frozen=True)
class TokenStore:
    """An opened store: its folder, manifest and tokenizer."""

    directory: Path
    manifest: dict
    tokenizer: Tokenizer
    built: bool = False  # by this process (else reused)

    def split(self, name: str) -> TokenArray | None:
        """The split's token array, or None if the store has none for it. Without validation files, validation
        is the training tokens' last tenth (cut as the built-in corpora are: 90/10, contiguous)."""
        counts = self.manifest["tokens"]
        if name == "val" and "val" not in counts:
            train = self._file("train")
            return train.part(held_out_cut(len(train)), len(train))
        if name == "train" and "val" not in counts:
            train = self._file("train")
            return train.part(0, held_out_cut(len(train)))
        return self._file(name) if name in counts else None

    def _file(self, name: str) -> TokenArray:
        return TokenArray(str(self.directory / f"{name}.bin"), self.manifest["dtype"], 0, self.manifest["tokens"][name])


def held_out_cut(tokens: int) -> int:
    """Where training ends in a training file whose last tenth is validation."""
    return int(tokens * (1 - HELD_OUT_FRACTION))


def _sources_record(split_sources: dict[str, list[Source]]) -> dict[str, list[dict]]:
    return {split: [{"path": str(s.path), "format": s.format, "sha256": s.sha256} for s in files]
            for split, files in split_sources.items()}  # fmt: skip


def _same_sources(manifest: dict, split_sources: dict[str, list[Source]]) -> bool:
    """Whether the store was made from the same data (by content: moving the files does not invalidate it)."""
    checksums = {split: [s["sha256"] for s in files] for split, files in manifest.get("sources", {}).items()}
    return checksums == {split: [s.sha256 for s in files] for split, files in split_sources.items()}


def sample_for_tokenizer(train: list[Source], sample_bytes: int, held_out: bool) -> Iterator[str]:
    """About ``sample_bytes`` of training records spread evenly over the training files (every k-th record), from
    about the part that stays training when the last tenth is validation: a BPE fitted on a bounded sample of a
    large corpus, reproducibly."""
    total = sum(s.text_bytes for s in train)
    limit = total * (1 - HELD_OUT_FRACTION) if held_out else total
    stride = max(1, round(limit / max(sample_bytes, 1)))
    seen = taken = 0
    for i, text in enumerate(records(train)):
        if seen >= limit or taken >= 2 * sample_bytes:  # the cap: a record-size estimate that was off
            return
        seen += len(text.encode())
        if i % stride == 0:
            taken += len(text)
            yield text


_worker_tokenizer: Tokenizer | None = None


def _init_worker(saved: dict) -> None:
    global _worker_tokenizer
    _worker_tokenizer = tokenizer_from_dict(saved)


def _encode_chunk(texts: list[str]) -> np.ndarray:
    assert _worker_tokenizer is not None
    return _encode(_worker_tokenizer, texts)


def _encode(tokenizer: Tokenizer, texts: list[str]) -> np.ndarray:
    return np.fromiter((i for ids in tokenizer.encode_batch(texts) for i in ids), dtype=np.int64)


def _chunks(texts: Iterable[str]) -> Iterator[list[str]]:
    chunk: list[str] = []
    size = 0
    for text in texts:
        chunk.append(text)
        size += len(text)
        if size >= CHUNK_CHARS:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _encoded_chunks(tokenizer: Tokenizer, texts: Iterable[str], workers: int) -> Iterator[np.ndarray]:
    """Token ids of ``texts`` chunk by chunk, in order. A `tokenizers` BPE encodes a chunk on all cores itself
    (the Rust library's thread pool); a character or word tokenizer is pure Python, so chunks go to ``workers``
    processes."""
    if workers <= 1 or isinstance(tokenizer, BPETokenizer):  # a `tokenizers` file of one's own too
        yield from (_encode(tokenizer, chunk) for chunk in _chunks(texts))
        return
    context = multiprocessing.get_context("fork")  # the workers need the tokenizer only, not a fresh interpreter
    with context.Pool(workers, _init_worker, (tokenizer.to_dict(),)) as pool:
        yield from pool.imap(_encode_chunk, _chunks(texts))


def build(directory: Path, split_sources: dict[str, list[Source]], tokenizer: Tokenizer, workers: int) -> dict:
    """Tokenize every split into ``directory`` (written beside it, then renamed into place) and return the
    manifest."""
    started = time.monotonic()
    dtype = "uint16" if tokenizer.vocab_size <= 1 << 16 else "uint32"
    tmp = directory.with_name(f".{directory.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tokens: dict[str, int] = {}
    try:  # a failed build (a full disk: the error names the store) leaves no half-written folder to fill it
        with writing(directory, instead=True):
            for split, files in split_sources.items():
                tokens[split] = 0
                with open(tmp / f"{split}.bin", "wb") as out:
                    for ids in _encoded_chunks(tokenizer, records(files), workers):
                        out.write(ids.astype(dtype).tobytes())
                        tokens[split] += len(ids)
            manifest = {
                "version": STORE_VERSION,
                "sources": _sources_record(split_sources),
                "tokenizer": {"kind": tokenizer.to_dict()["kind"], "sha256": fingerprint(tokenizer),
                              "vocab_size": tokenizer.vocab_size},
                "dtype": dtype,
                "tokens": tokens,
                "seconds": round(time.monotonic() - started, 3),
            }  # fmt: skip
            (tmp / TOKENIZER).write_text(json.dumps(tokenizer.to_dict()))
            write_json_atomic(tmp / MANIFEST, manifest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(tmp, directory)
    return manifest


def open_store(
    directory: Path,
    split_sources: dict[str, list[Source]],
    make_tokenizer: Callable[[], Tokenizer],
    given: Tokenizer | None = None,
    given_name: str = "",
    workers: int = 1,
) -> TokenStore:
    """The store in ``directory`` for these sources, built first if it is missing or its sources changed.

    One process builds it while the others (DDP ranks, concurrent sweep runs) wait on a lock beside it.

    Args:
        directory: the store's folder.
        split_sources: the files of each split ("train", optionally "val" and "test").
        make_tokenizer: fits the tokenizer (called only when the store is built and ``given`` is None).
        given: a saved tokenizer the run was told to use; a store made by another one is an error.
        given_name: where ``given`` came from, for that error.
        workers: processes that tokenize a character or word tokenizer's chunks.
    """
    ready = _reuse(directory, split_sources, given, given_name)
    if ready is not None:  # without the lock: a store on a read-only filesystem is read as it is
        return ready
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.with_name(f".{directory.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = _reuse(directory, split_sources, given, given_name)  # another process may have built it meanwhile
        if ready is not None:
            return ready
        if _manifest(directory) is not None:
            log.warning("token store %s: its sources changed; tokenizing again", directory)
        tokenizer = given if given is not None else make_tokenizer()
        manifest = build(directory, split_sources, tokenizer, workers)
        log.info("token store %s: %s tokens in %.1f s", directory, manifest["tokens"], manifest["seconds"])
        return TokenStore(directory, manifest, tokenizer, built=True)


def _reuse(directory: Path, split_sources: dict[str, list[Source]], given: Tokenizer | None, given_name: str):
    """The store in ``directory`` if it was made from these sources (with ``given``, if any), else None."""
    manifest = _manifest(directory)
    if manifest is None or not _same_sources(manifest, split_sources):
        return None
    if given is not None and fingerprint(given) != manifest["tokenizer"]["sha256"]:
        raise ValueError(
            f"token store {directory} was made by another tokenizer than {given_name} "
            f"({manifest['tokenizer']['kind']}, vocabulary {manifest['tokenizer']['vocab_size']}); "
            "point data.token_store at a new folder (or unset it) to tokenize again with this one"
        )
    return TokenStore(directory, manifest, given or _saved_tokenizer(directory))


def _manifest(directory: Path) -> dict | None:
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if manifest.get("version") == STORE_VERSION else None


def _saved_tokenizer(directory: Path) -> Tokenizer:
    saved = json.loads((directory / TOKENIZER).read_text())
    return tokenizer_from_dict(saved)


def store_key(split_sources: dict[str, list[Source]], tokenizer_spec: dict) -> str:
    """The default store folder's name: a digest of the sources' contents and how the tokenizer is made."""
    key = {"sources": {k: [s.sha256 for s in v] for k, v in split_sources.items()}, "tokenizer": tokenizer_spec}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
