"""Sequence-to-sequence pairs: SCAN (generated) and Multi30k De→En (downloaded)."""

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from itertools import repeat
from typing import Literal, get_args

import numpy as np
import torch
from jsonargparse.typing import PositiveInt
from torch import Tensor
from torch.utils.data import DataLoader

from contract.labels import IGNORE_INDEX
from datamodules.base import SuiteDataModule, TestSplit, check_own_data, checked_test_split
from datamodules.download import resolve, sha256_bytes
from datamodules.parallel_files import parallel_splits, read_aligned_lines
from datamodules.predict_inputs import DEFAULT_INPUTS, encode_inputs, read_lines
from datamodules.sampling import BucketBatchSampler, EpochSampler, ResumeBatches, batches_done_this_epoch, generator
from datamodules.scan import SCAN_SPLITS, Pair, ScanSplitName, all_pairs
from datamodules.tokenization import Tokenizer, TokenizerFields, build_tokenizer, load_tokenizer

# `files`: the user's own parallel text (`datamodules.parallel_files`), a joint BPE by default
TranslationDatasetName = Literal["scan", "multi30k", "files"]
FILES: TranslationDatasetName = "files"
TranslationTokenizerName = Literal["word", "bpe"]


@dataclass(frozen=True)
class PairSplits:
    """(source, target) text pairs of each split and the SHA-256 of the raw data."""

    train: list[Pair]
    val: list[Pair]
    test: list[Pair]
    sha256: str


SCAN_VAL_SIZE = 1000


def _load_scan(split: ScanSplitName, seed: int, data_dir: str | None, cache_dir: str) -> PairSplits:
    """SCAN has no validation split: val is a seeded 1,000-pair subset of the test split (cheap to
    decode every epoch), test is the whole test split. Generated, so nothing is read from disk."""
    train, test = SCAN_SPLITS[split]()
    keep = torch.randperm(len(test), generator=generator(seed, 2))[:SCAN_VAL_SIZE].sort().values
    raw = "\n".join(f"{c}\t{a}" for c, a in all_pairs()).encode()
    return PairSplits(train, [test[i] for i in keep.tolist()], test, sha256_bytes(raw))


def held_out_validation(pairs: PairSplits, seed: int) -> PairSplits:
    """SCAN with `test_split: held_out`: validation is a seeded 1,000 of the training pairs, removed from
    training, so a search selects in distribution without seeing a test pair (on the length splits, the
    test pairs are the longer ones the claim is about); test stays the whole test split."""
    held = set(torch.randperm(len(pairs.train), generator=generator(seed, 3))[:SCAN_VAL_SIZE].tolist())
    train = [p for i, p in enumerate(pairs.train) if i not in held]
    return PairSplits(train, [p for i, p in enumerate(pairs.train) if i in held], pairs.test, pairs.sha256)


MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{}"
MULTI30K_SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
}


def _load_multi30k(split: ScanSplitName, seed: int, data_dir: str | None, cache_dir: str) -> PairSplits:
    """Multi30k task 1, German → English: 29,000 / 1,014 / 1,000 (test 2016 Flickr) pairs.
    ``split`` and ``seed`` do not apply: the splits are the official ones. The checksum is the
    SHA-256 of the six files' ``name sha256`` lines."""
    paths = {
        name: resolve("multi30k", name, data_dir, cache_dir, MULTI30K_URL.format(name), sha)
        for name, sha in MULTI30K_SHA256.items()
    }

    def pairs(prefix: str) -> list[Pair]:
        de, en = read_aligned_lines(paths[f"{prefix}.de.gz"]), read_aligned_lines(paths[f"{prefix}.en.gz"])
        if len(de) != len(en):
            raise ValueError(f"multi30k {prefix}: {len(de)} German lines but {len(en)} English lines")
        return list(zip(de, en))

    digest = sha256_bytes("".join(f"{n} {s}\n" for n, s in sorted(MULTI30K_SHA256.items())).encode())
    return PairSplits(pairs("train"), pairs("val"), pairs("test_2016_flickr"), digest)


@dataclass(frozen=True)
class _DatasetSpec:
    load: Callable[[ScanSplitName, int, str | None, str], PairSplits]
    default_tokenizer: TranslationTokenizerName
    held_out: Callable[[PairSplits, int], PairSplits]  # the splits with `test_split: held_out`


DATASETS: dict[TranslationDatasetName, _DatasetSpec] = {
    "scan": _DatasetSpec(_load_scan, "word", held_out_validation),
    "multi30k": _DatasetSpec(_load_multi30k, "bpe", lambda pairs, seed: pairs),  # official, disjoint splits
}
assert set(DATASETS) | {FILES} == set(get_args(TranslationDatasetName))

Example = tuple[list[int], list[int], str]  # (source ids, target ids, target text)


def collate_pairs(batch: Sequence[Example], pad_id: int, bos_id: int, eos_id: int) -> dict[str, Tensor | list[str]]:
    """Pad a list of examples into the translation batch dict (see :class:`TranslationDataModule`)."""
    S = max(len(s) for s, _, _ in batch)
    T = max(len(t) for _, t, _ in batch) + 1  # + bos (inputs) / eos (targets)
    src_ids = torch.full((len(batch), S), pad_id, dtype=torch.long)
    src_mask = torch.zeros((len(batch), S), dtype=torch.long)
    tgt_in = torch.full((len(batch), T), pad_id, dtype=torch.long)
    tgt_out = torch.full((len(batch), T), IGNORE_INDEX, dtype=torch.long)
    for b, (s, t, _) in enumerate(batch):
        src_ids[b, : len(s)] = torch.tensor(s, dtype=torch.long)
        src_mask[b, : len(s)] = 1
        tgt_in[b, : len(t) + 1] = torch.tensor([bos_id, *t], dtype=torch.long)
        tgt_out[b, : len(t) + 1] = torch.tensor([*t, eos_id], dtype=torch.long)
    return {
        "src_ids": src_ids,
        "src_mask": src_mask,
        "tgt_in": tgt_in,
        "tgt_out": tgt_out,
        "tgt_text": [text for _, _, text in batch],
    }


class EncodedPairs(Sequence[Example]):
    """A split's pairs as token ids in two flat arrays with offsets, and the pairs' target text.

    Lists of Python ints cost ~40 bytes a token (42 measured on Multi30k's training pairs); these arrays 2
    (4 for vocabularies past 65,536), so a WMT-size corpus (4.5M pairs, ~270M tokens) takes ~0.6 GB per process
    instead of ~11 GB. The pairs are encoded `chunk` at a time, so the lists never exist all at once either.
    """

    def __init__(self, pairs: list[Pair], encode: Callable[[list[Pair]], Iterator[tuple[list[int], list[int]]]],
                 vocab_size: int, chunk: int = 65536) -> None:  # fmt: skip
        dtype = np.uint16 if vocab_size <= 1 << 16 else np.int32
        sources, targets = [np.zeros(0, dtype)], [np.zeros(0, dtype)]
        source_lengths, target_lengths = [], []
        for start in range(0, len(pairs), chunk):
            encoded = list(encode(pairs[start : start + chunk]))
            sources += [np.fromiter((i for s, _ in encoded for i in s), dtype)]
            targets += [np.fromiter((i for _, t in encoded for i in t), dtype)]
            source_lengths += [len(s) for s, _ in encoded]
            target_lengths += [len(t) for _, t in encoded]
        self.sources, self.targets = np.concatenate(sources), np.concatenate(targets)
        self.source_offsets = np.cumsum([0, *source_lengths], dtype=np.int64)
        self.target_offsets = np.cumsum([0, *target_lengths], dtype=np.int64)
        self.pairs = pairs  # the target text (BLEU's references) is read from the pairs themselves: no copy

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> Example:  # type: ignore[override]
        if not -len(self) <= i < len(self):
            raise IndexError(f"pair {i} of {len(self)}")
        i, s, t = i % len(self), self.source_offsets, self.target_offsets
        source = self.sources[s[i] : s[i + 1]].tolist()
        return source, self.targets[t[i] : t[i + 1]].tolist(), self.pairs[i][1]

    def lengths(self) -> list[int]:
        """Source + target tokens of each pair (what the training batches are bucketed by)."""
        return (np.diff(self.source_offsets) + np.diff(self.target_offsets)).tolist()

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.sources, self.targets, self.source_offsets, self.target_offsets))


@dataclass(frozen=True)
class _Encoded:
    tokenizer: Tokenizer
    train: EncodedPairs
    val: EncodedPairs
    test: EncodedPairs
    sha256: str


class TranslationDataModule(TokenizerFields, SuiteDataModule):
    """Source → target pairs for an encoder-decoder.

    Batches are dicts:

    - ``src_ids`` (B, S) long, padded with ``pad_token_id``;
    - ``src_mask`` (B, S) long, 1 = token, 0 = padding;
    - ``tgt_in`` (B, T) long, ``[bos] + target``, padded with ``pad_token_id``;
    - ``tgt_out`` (B, T) long, ``target + [eos]``, padded with ``IGNORE_INDEX`` (-100);
    - ``tgt_text`` list of B reference strings (untruncated).

    Training batches group similar lengths (sorted within seeded chunks of 100 batches, batch order
    shuffled), a pure function of (seed, epoch). SCAN has no validation split: val is a seeded
    1,000-pair subset of its test split (``test_split: val``) or of its training pairs, removed from
    training (``held_out``); test is the whole test split, the same for every seed (scan simple's split is drawn
    with ``TEST_SPLIT_SEED``). ``seed`` seeds the val subset and the batch order; ``data_dir`` holds the multi30k
    ``*.gz`` files.

    ``predict_dataloader`` (``cli.py predict``) gives ``src_ids``, ``src_mask``, ``src_text``, ``tgt_text`` (the
    reference, ``""`` when unknown) and ``index``: the lines of ``predict_file`` or, unset, the first validation
    sources with their references.

    ``dataset: files`` trains on the user's own parallel text: ``train_files`` (and optionally ``val_files``,
    ``test_files``), each ``[source file, target file]`` of aligned lines; a split without files is 1,000 of the
    training pairs (a tenth if fewer), held out: test the same for every seed, then validation seeded.

    Args:
        dataset: ``scan`` (generated), ``multi30k`` (German → English) or ``files`` (the ``*_files`` below).
        split: SCAN split (``simple`` seeded 80/20, ``length`` ≤ 22 actions, ``cutoff26`` ≤ 26
            actions); ignored by multi30k.
        tokenizer: ``word`` or byte-level ``bpe``, one vocabulary shared by source and target and
            fitted on the training pairs; ``None`` picks the dataset's default (scan: word, multi30k: bpe).
        bpe_vocab_size: BPE vocabulary size, specials included.
        max_len: source and ``tgt_in`` / ``tgt_out`` are truncated to this many tokens.
        batch_size: pairs per batch.
        predict_file: source sentences for ``cli.py predict``, one per line (UTF-8; blank lines skipped;
            truncated to ``max_len`` tokens as in training); unset: the first 4 validation sources.
        tokenizer_file: a saved tokenizer (a run's ``tokenizer.json``) to use instead of fitting one on the
            training pairs: predicting or evaluating an old run with exactly its vocabulary.
        test_split: ``val`` (what runs before held-out splits measured) or ``held_out``: for SCAN, validation
            drawn from the training pairs instead of the test pairs (what a tuned sweep needs); multi30k's
            official validation and test splits are disjoint either way.
        train_files: ``dataset: files``: ``[source, target]`` training files (``.gz`` read as gzip).
        val_files: ``[source, target]`` validation files; unset: held out of the training pairs.
        test_files: ``[source, target]`` test files; unset: held out of the training pairs.
        **kwargs: ``seed``, ``num_workers``, ``data_dir``, ``cache_dir``: see :class:`SuiteDataModule`.
    """

    def __init__(
        self,
        dataset: TranslationDatasetName = "scan",
        split: ScanSplitName = "simple",
        tokenizer: TranslationTokenizerName | None = None,
        bpe_vocab_size: int = 8000,
        max_len: int = 64,
        batch_size: PositiveInt = 64,
        predict_file: str | None = None,
        tokenizer_file: str | None = None,
        test_split: TestSplit = "val",
        train_files: list[str] | None = None,
        val_files: list[str] | None = None,
        test_files: list[str] | None = None,
        **kwargs,
    ) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        self.dataset, self.split = dataset, split
        self.test_split = checked_test_split(test_split)
        self.files = {"train": train_files, "val": val_files, "test": test_files}
        paths = {f"{split}_files": files for split, files in self.files.items()}
        check_own_data("dataset", dataset, FILES, paths, "[source file, target file]")
        self.tokenizer_name: TranslationTokenizerName = tokenizer or (
            "bpe" if dataset == FILES else DATASETS[dataset].default_tokenizer
        )
        self.bpe_vocab_size, self.max_len = bpe_vocab_size, max_len
        self.predict_file, self.tokenizer_file = predict_file, tokenizer_file

    @cached_property
    def _pairs(self) -> PairSplits:
        if self.dataset == FILES:  # disjoint splits whatever test_split says
            splits, sha256 = parallel_splits(self.files, self.seed)
            return PairSplits(splits["train"], splits["val"], splits["test"], sha256)
        pairs = DATASETS[self.dataset].load(self.split, self.seed, self.data_dir, self.cache_dir)
        return DATASETS[self.dataset].held_out(pairs, self.seed) if self.test_split == "held_out" else pairs

    @cached_property
    def tokenizer(self) -> Tokenizer:
        # a saved tokenizer needs no data: translating a `predict_file` then reads no pairs at all
        if self.tokenizer_file:
            return load_tokenizer(self.tokenizer_file, self.tokenizer_name)
        train = self._pairs.train
        return build_tokenizer(self.tokenizer_name, [s for s, _ in train] + [t for _, t in train], self.bpe_vocab_size)

    @cached_property
    def _data(self) -> _Encoded:
        pairs, tok = self._pairs, self.tokenizer

        def encode(split: list[Pair]) -> Iterator[tuple[list[int], list[int]]]:
            src = tok.encode_batch([s for s, _ in split])
            tgt = tok.encode_batch([t for _, t in split])
            # targets keep max_len - 1 tokens so that [bos] + target fits in max_len
            return ((s[: self.max_len], t[: self.max_len - 1]) for s, t in zip(src, tgt))

        def encoded(split: list[Pair]) -> EncodedPairs:
            return EncodedPairs(split, encode, tok.vocab_size)

        return _Encoded(tok, encoded(pairs.train), encoded(pairs.val), encoded(pairs.test), pairs.sha256)

    @property
    def data_checksum(self) -> str:
        """SHA-256 (hex) of the raw data (for multi30k, of its files' checksums)."""
        return self._data.sha256

    @property
    def split_checksums(self) -> dict[str, str]:
        """SHA-256 (hex) of each split's pairs as the run used them: recorded in `run.json`."""
        return {name: sha256_bytes("\n".join(f"{s}\t{t}" for s, t in getattr(self._pairs, name)).encode())
                for name in ("train", "val", "test")}  # fmt: skip

    def prepare_data(self) -> None:
        _ = self._data

    def _collate(self) -> partial:
        return partial(collate_pairs, pad_id=self.pad_token_id, bos_id=self.bos_token_id, eos_id=self.eos_token_id)

    def train_dataloader(self) -> DataLoader:
        train = self._data.train
        sampler = BucketBatchSampler(EpochSampler(len(train), self.seed), train.lengths(), self.global_batch_size)
        resumed = ResumeBatches(sampler, batches_done_this_epoch(self.trainer, len(sampler)))
        return self._train_loader(train, resumed, collate_fn=self._collate())

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader(self._data.val, collate_fn=self._collate())

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader(self._data.test, collate_fn=self._collate())

    def predict_dataloader(self) -> DataLoader:
        if self.predict_file:
            sources, references = read_lines(self.predict_file), None
            source = f"predict_file {self.predict_file}"
        else:
            sources, references = zip(*self._pairs.val[:DEFAULT_INPUTS])
            source = "default inputs (validation sources)"
        items = encode_inputs(self.tokenizer, sources, source)
        for item, reference in zip(items, references or repeat("")):
            # a source with no target: collate_pairs pads the sources as in training; tgt_text carries the reference
            item["example"] = (item["input_ids"][: self.max_len], [], reference)
        return self._eval_loader(items, collate_fn=self._collate_predict)

    def _collate_predict(self, items: Sequence[dict]) -> dict[str, Tensor | list]:
        batch = self._collate()([item["example"] for item in items])
        del batch["tgt_in"], batch["tgt_out"]  # no target to teacher-force
        return batch | {"src_text": [item["text"] for item in items], "index": [item["index"] for item in items]}
