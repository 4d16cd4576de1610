"""A user's own parallel text for translation: per split, a source file and a target file whose line i translates
each other (IWSLT / WMT style `train.de` + `train.en`; `.gz` read as gzip)."""

import gzip
import hashlib
from pathlib import Path

import torch

from datamodules.download import sha256_file
from datamodules.sampling import TEST_SPLIT_SEED, generator
from datamodules.scan import Pair

HELD_OUT_PAIRS = 1000  # without validation (or test) files: this many training pairs, or a tenth if fewer


def read_aligned_lines(path: str | Path) -> list[str]:
    """A parallel corpus file's lines (`.gz` read as gzip), blank ones kept: line i pairs with line i of the
    other side. Split on "\n" only: str.splitlines would also split on U+2028 etc. and break the alignment."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read().removesuffix("\n").split("\n")


def _pairs(files: list[str], split: str) -> list[Pair]:
    if len(files) != 2:
        raise ValueError(f"data.{split}_files needs two paths, [source, target]; got {files}")
    for path in files:
        if not Path(path).is_file():
            raise FileNotFoundError(f"data.{split}_files: {path} does not exist; check the path")
        if Path(path).stat().st_size == 0:
            raise ValueError(f"data.{split}_files: {path} is empty; give a file with one sentence per line")
    source, target = (read_aligned_lines(path) for path in files)
    if len(source) != len(target):
        raise ValueError(
            f"data.{split}_files: {files[0]} has {len(source):,} lines but {files[1]} has {len(target):,}; "
            "line i of one must translate line i of the other"
        )
    # a pair with an empty side teaches nothing (and a BLEU of an empty reference is undefined)
    return [(s, t) for s, t in zip(source, target) if s.strip() and t.strip()]


def _hold_out(pairs: list[Pair], seed: int, tag: int) -> tuple[list[Pair], list[Pair]]:
    """(rest, held out): a seeded HELD_OUT_PAIRS of ``pairs`` (a tenth if that is fewer), order kept."""
    size = min(HELD_OUT_PAIRS, len(pairs) // 10)
    if size == 0:
        raise ValueError(f"{len(pairs)} training pairs are too few to hold any out; give data.val_files")
    held = set(torch.randperm(len(pairs), generator=generator(seed, tag))[:size].tolist())
    return [p for i, p in enumerate(pairs) if i not in held], [p for i, p in enumerate(pairs) if i in held]


def parallel_splits(files: dict[str, list[str] | None], seed: int) -> tuple[dict[str, list[Pair]], str]:
    """Each split's pairs and one SHA-256 of every file read. A split without files is held out of the training
    pairs, disjoint: test first, the same for every seed (``TEST_SPLIT_SEED``), then validation, seeded by ``seed``.

    Raises:
        FileNotFoundError, ValueError: a missing or empty file, files of different line counts.
    """
    if not files.get("train"):
        raise ValueError("data.dataset=files needs data.train_files: [source file, target file]")
    splits = {split: _pairs(paths, split) for split, paths in files.items() if paths}
    for split, split_seed, tag in (("test", TEST_SPLIT_SEED, 5), ("val", seed, 4)):
        if split not in splits:
            splits["train"], splits[split] = _hold_out(splits["train"], split_seed, tag)
    digest = hashlib.sha256()
    for split, paths in sorted(files.items()):
        for path in paths or ():
            digest.update(f"{split} {sha256_file(path)}\n".encode())
    return splits, digest.hexdigest()
