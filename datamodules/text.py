"""Language-modelling text: a corpus registry, a tokenizer fitted on its training part, and
training windows that are a pure function of (seed, sample index)."""

import hashlib
import json
import math
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from pathlib import Path
from typing import Literal, get_args

import torch
from jsonargparse.typing import PositiveInt
from torch import Tensor
from torch.utils.data import BatchSampler, DataLoader, Dataset

from datamodules.base import SuiteDataModule, TestSplit, check_own_data, checked_test_split
from datamodules.download import resolve, sha256_bytes, sha256_file
from datamodules.predict_inputs import PROMPT_CHARS, collate_lists, encode_inputs, read_lines, text_prompts
from datamodules.sampling import GlobalIndexSampler, mix
from datamodules.text_files import Source, sources
from datamodules.token_store import TokenArray, TokenStore, open_store, sample_for_tokenizer, store_key
from datamodules.tokenization import Tokenizer, TokenizerFields, build_tokenizer, load_tokenizer

# `files`: the user's own train / val / test files (`datamodules.text_files`), tokenized once into a token store
CorpusName = Literal["default", "tinyshakespeare", "wikitext2", "files"]
FILES: CorpusName = "files"
TextTokenizerName = Literal["char", "bpe"]
# `test_split: held_out` (datamodules.base.TestSplit) for a corpus: its official test split (WikiText-2),
# else the second half of the validation text (the first half stays validation; training text is unchanged)

PROMPT_TEXT_TOKENS = 20_000  # of a token store's validation split, decoded for default prompts
TRAIN_FRACTION = 0.9  # contiguous split of corpora without an official validation split


@dataclass(frozen=True)
class Corpus:
    """Raw text of a corpus' train and validation parts (and its official test part, if it has one) and the
    SHA-256 of the data they came from."""

    train: str
    val: str
    sha256: str
    test: str | None = None

    def held_out(self) -> tuple[str, str]:
        """(validation, test) text: the official test part, or the validation text cut in two contiguous
        halves at a line boundary (lines are what the tokenizer encodes)."""
        if self.test is not None:
            return self.val, self.test
        cut = self.val.find("\n", len(self.val) // 2) + 1 or len(self.val) // 2
        return self.val[:cut], self.val[cut:]


def _split(text: str, sha256: str) -> Corpus:
    """Contiguous 90/10 split: validation text follows training text, as in nanoGPT."""
    cut = int(len(text) * TRAIN_FRACTION)
    return Corpus(text[:cut], text[cut:], sha256)


def _load_default(data_dir: str | None, cache_dir: str) -> Corpus:
    """Python's own documentation topics (``pydoc_data.topics``): real English prose and code,
    ~0.5 MB, shipped with every CPython, so it needs no download. Its text, hence the checksum,
    differs between Python releases."""
    from pydoc_data.topics import topics

    text = "".join(topics[k] for k in sorted(topics))
    return _split(text, sha256_bytes(text.encode()))


TINYSHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TINYSHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


def _load_tinyshakespeare(data_dir: str | None, cache_dir: str) -> Corpus:
    """Tiny Shakespeare (karpathy/char-rnn ``input.txt``, 1,115,394 bytes)."""
    path = resolve("tinyshakespeare", "input.txt", data_dir, cache_dir, TINYSHAKESPEARE_URL, TINYSHAKESPEARE_SHA256)
    return _split(path.read_text(encoding="utf-8"), TINYSHAKESPEARE_SHA256)


# Byte-identical mirror (4,721,645 bytes) of Salesforce's original
# https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-raw-v1.zip, which is no longer
# served; pinned to a commit of the ggml-org/ci dataset repository so the URL cannot drift.
WIKITEXT2_URL = (
    "https://huggingface.co/datasets/ggml-org/ci/resolve/"
    "927b3642933080f1b0e811e2f916e14c292992f9/wikitext-2-raw-v1.zip"
)
WIKITEXT2_SHA256 = "ef7edb566e3e2b2d31b29c1fdb0c89a4cc683597484c3dc2517919c615435a11"


def _load_wikitext2(data_dir: str | None, cache_dir: str) -> Corpus:
    """WikiText-2 raw; uses its official train / valid / test files rather than a 90/10 split."""
    path = resolve("wikitext2", "wikitext-2-raw-v1.zip", data_dir, cache_dir, WIKITEXT2_URL, WIKITEXT2_SHA256)
    with zipfile.ZipFile(path) as z:
        train, val, test = (z.read(f"wikitext-2-raw/wiki.{s}.raw").decode("utf-8") for s in ("train", "valid", "test"))
    return Corpus(train, val, WIKITEXT2_SHA256, test)


CORPORA: dict[CorpusName, Callable[[str | None, str], Corpus]] = {
    "default": _load_default,
    "tinyshakespeare": _load_tinyshakespeare,
    "wikitext2": _load_wikitext2,
}
assert set(CORPORA) | {FILES} == set(get_args(CorpusName))


class RandomWindows(Dataset[dict[str, Tensor]]):
    """Windows of ``seq_len + 1`` tokens whose start is a pure function of (seed, index).

    Any non-negative index is valid (``len`` is one epoch's worth); :class:`GlobalIndexSampler`
    feeds epoch e the indices ``e * len .. (e + 1) * len - 1``.

    Args:
        ids: the training token stream, shape (N,): a tensor, or a store's file read window by window.
        seq_len: tokens per input.
        seed: run seed.
        num_samples: samples per epoch.
    """

    def __init__(self, ids: Tensor | TokenArray, seq_len: int, seed: int, num_samples: int) -> None:
        if len(ids) < seq_len + 1:
            raise ValueError(f"training split has {len(ids)} tokens, fewer than seq_len + 1 = {seq_len + 1}")
        self.ids, self.seq_len, self.seed, self.num_samples = ids, seq_len, seed, num_samples

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        start = mix(self.seed, i) % (len(self.ids) - self.seq_len)  # 64-bit hash: modulo bias negligible
        window = self.ids[start : start + self.seq_len + 1]
        return {"input_ids": window[:-1], "labels": window[1:], "index": i}


class FixedWindows(Dataset[dict[str, Tensor]]):
    """Non-overlapping windows of ``length`` tokens tiling ``ids[:-1]`` (inputs) / ``ids[1:]`` (labels).

    Args:
        ids: the evaluated token stream; ``len(ids) - 1`` must be a multiple of ``length``.
        length: tokens per window.
    """

    def __init__(self, ids: Tensor, length: int) -> None:
        assert (len(ids) - 1) % length == 0
        self.ids, self.length = ids, length

    def __len__(self) -> int:
        return (len(self.ids) - 1) // self.length

    def __getitem__(self, k: int) -> dict[str, Tensor]:
        s = k * self.length
        return {"input_ids": self.ids[s : s + self.length], "labels": self.ids[s + 1 : s + self.length + 1], "index": k}


@dataclass(frozen=True)
class _Tokenized:
    tokenizer: Tokenizer
    train_ids: Tensor | TokenArray  # (N_train,) long
    val_ids: Tensor | TokenArray  # (N_val,) long, the whole validation split
    test_ids: Tensor | TokenArray | None  # (N_test,) long, the held-out test split; None with test_split "val"
    sha256: str
    split_sha256: dict[str, str]  # of each split's text, as the run used it


class TextDataModule(TokenizerFields, SuiteDataModule):
    """Next-token prediction on a text corpus.

    Batches are ``{"input_ids": LongTensor(B, T), "labels": LongTensor(B, T), "index": LongTensor(B)}``
    with ``labels[:, t] = input_ids[:, t + 1]`` of the underlying stream and ``index`` each window's
    sample index (what a model's own per-example randomness, e.g. MLM masking, is keyed by: the same
    on 1 or N processes). ``val_dataloader`` (and ``test_dataloader``, the same) returns one loader
    per entry of ``eval_lengths``, each tiling the *same* validation tokens
    with non-overlapping windows of that length, so losses at different
    lengths are over identical targets; ``test_dataloader`` does the same on the test split
    (``test_split``). ``seed`` seeds the training windows; ``data_dir`` holds the
    corpus file (``input.txt`` / ``wikitext-2-raw-v1.zip``).

    ``predict_dataloader`` (``cli.py predict``) gives ``{"index", "text", "input_ids"}`` lists: the lines of
    ``predict_file`` or, unset, the starts of a few validation lines; a GPT continues them, a masked LM fills
    their ``<mask>`` tokens.

    ``corpus: files`` trains on the user's own text (``train_files``, ``val_files``, ``test_files``: paths or globs
    of plain text, JSON Lines with a ``text`` field, Parquet with a ``text`` column, or a folder saved by
    ``datasets``). It is tokenized once (``cli.py prepare``, or the first run) into a token store that every
    later run and process reads window by window, so memory does not grow with the corpus.

    Args:
        corpus: which text; ``default`` needs no download; ``files``: the ``*_files`` below.
        tokenizer: ``char`` or byte-level ``bpe``, fitted on the training part only (for ``files``, on about
            ``tokenizer_sample_bytes`` of it, spread over the files).
        bpe_vocab_size: BPE vocabulary size, specials included.
        seq_len: training window length T.
        eval_lengths: validation window lengths; default ``[1, 2, 4, 8]`` times ``seq_len``.
        val_tokens: predict this many validation tokens at every length (capped to the split and
            rounded down to a multiple of the lengths' least common multiple).
        batch_size: windows per batch.
        train_batches_per_epoch: an epoch is this many batches of random windows.
        predict_file: inputs of ``cli.py predict``, one per line (UTF-8; blank lines skipped): prompts for a
            GPT, sentences with ``<mask>`` for a masked LM; unset: the starts (40 characters, at most half of
            ``seq_len``) of 4 validation lines.
        tokenizer_file: a saved tokenizer (a run's ``tokenizer.json``) to use instead of fitting one on the
            training text: predicting or evaluating an old run with exactly its vocabulary.
        test_split: what ``cli.py test`` evaluates: ``val`` (the validation split: runs before held-out
            splits keep meaning what they measured) or ``held_out`` (WikiText-2's official test file; else
            the second half of the validation text, the first half staying validation). Training text is
            the same either way.
        train_files: ``corpus: files``: the training text, a path or glob or a list of them.
        val_files: the validation text; unset: the training tokens' last tenth.
        test_files: the held-out test text (``test_split: held_out``); unset: the validation tokens' second half.
        token_store: the token store's folder; unset: one under ``cache_dir/token_stores`` named by a digest of
            the files' contents and the tokenizer settings (a changed file makes a new store).
        tokenizer_sample_bytes: how much training text a tokenizer for ``files`` is fitted on.
        **kwargs: ``seed``, ``num_workers``, ``data_dir``, ``cache_dir``: see :class:`SuiteDataModule`.
    """

    def __init__(
        self,
        corpus: CorpusName = "default",
        tokenizer: TextTokenizerName = "char",
        bpe_vocab_size: int = 1024,
        seq_len: PositiveInt = 128,
        eval_lengths: list[int] | None = None,
        val_tokens: PositiveInt = 65536,
        batch_size: PositiveInt = 32,
        train_batches_per_epoch: PositiveInt = 1000,
        predict_file: str | None = None,
        tokenizer_file: str | None = None,
        test_split: TestSplit = "val",
        train_files: str | list[str] | None = None,
        val_files: str | list[str] | None = None,
        test_files: str | list[str] | None = None,
        token_store: str | None = None,
        tokenizer_sample_bytes: PositiveInt = 10_000_000,
        **kwargs,
    ) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        self.corpus, self.tokenizer_name, self.bpe_vocab_size = corpus, tokenizer, bpe_vocab_size
        self.seq_len, self.val_tokens = seq_len, val_tokens
        self.eval_lengths = list(eval_lengths) if eval_lengths else [seq_len * k for k in (1, 2, 4, 8)]
        self.train_batches_per_epoch = train_batches_per_epoch
        self.predict_file, self.tokenizer_file = predict_file, tokenizer_file
        self.test_split = checked_test_split(test_split)
        self.files = {"train": train_files, "val": val_files, "test": test_files}
        self.token_store, self.tokenizer_sample_bytes = token_store, tokenizer_sample_bytes
        paths = {f"{split}_files": value for split, value in self.files.items()}
        check_own_data("corpus", corpus, FILES, paths, "a path or glob of your training text")

    @cached_property
    def _corpus(self) -> Corpus:
        return CORPORA[self.corpus](self.data_dir, self.cache_dir)

    @cached_property
    def _sources(self) -> dict[str, list[Source]]:
        return {split: sources(value, split) for split, value in self.files.items() if value}

    @cached_property
    def _store(self) -> TokenStore:
        tokenizer_spec = (
            {"file": sha256_file(self.tokenizer_file)} if self.tokenizer_file
            else {"kind": self.tokenizer_name, "sample_bytes": self.tokenizer_sample_bytes}
            | ({"vocab_size": self.bpe_vocab_size} if self.tokenizer_name == "bpe" else {})
        )  # fmt: skip
        split_sources = self._sources
        default = Path(self.cache_dir).expanduser() / "token_stores" / store_key(split_sources, tokenizer_spec)
        held_out = "val" not in split_sources

        def fit() -> Tokenizer:
            sample = list(sample_for_tokenizer(split_sources["train"], self.tokenizer_sample_bytes, held_out))
            return build_tokenizer(self.tokenizer_name, sample, self.bpe_vocab_size)

        return open_store(
            Path(self.token_store).expanduser() if self.token_store else default, split_sources, make_tokenizer=fit,
            given=load_tokenizer(self.tokenizer_file, self.tokenizer_name) if self.tokenizer_file else None,
            given_name=f"data.tokenizer_file {self.tokenizer_file}",
            workers=len(os.sched_getaffinity(0)),
        )  # fmt: skip

    @cached_property
    def tokenizer(self) -> Tokenizer:
        if self.corpus == FILES:
            return self._store.tokenizer
        # a saved tokenizer needs no corpus: predicting from `predict_file` then reads no data at all
        if self.tokenizer_file:
            return load_tokenizer(self.tokenizer_file, self.tokenizer_name)
        # line by line: BPE trains and encodes lines in parallel; lines keep their newlines
        return build_tokenizer(self.tokenizer_name, self._corpus.train.splitlines(keepends=True), self.bpe_vocab_size)

    @cached_property
    def _data(self) -> _Tokenized:
        # built on first use (a property read by the CLI, prepare_data or setup), then kept in memory
        if self.corpus == FILES:
            return self._stored()
        corpus, tok = self._corpus, self.tokenizer
        train_lines = corpus.train.splitlines(keepends=True)

        def as_tensor(lines: list[str]) -> Tensor:
            return torch.tensor(list(chain.from_iterable(tok.encode_batch(lines))), dtype=torch.long)

        val, test = corpus.held_out() if self.test_split == "held_out" else (corpus.val, None)
        texts = {"train": corpus.train, "val": val} | ({"test": test} if test is not None else {})
        split_sha256 = {name: sha256_bytes(text.encode()) for name, text in texts.items()}
        test_ids = None if test is None else as_tensor(test.splitlines(keepends=True))
        return _Tokenized(tok, as_tensor(train_lines), as_tensor(val.splitlines(keepends=True)), test_ids,
                          corpus.sha256, split_sha256)  # fmt: skip

    def _stored(self) -> _Tokenized:
        """The splits of `corpus: files`, read from the token store window by window."""
        store, split_sources = self._store, self._sources
        train, val, test = (store.split(name) for name in ("train", "val", "test"))
        names = {split: ", ".join(str(s.path) for s in files) for split, files in split_sources.items()}
        if len(train) < self.seq_len + 1:
            raise ValueError(
                f"data.train_files ({names['train']}) hold {len(train)} training tokens, fewer than one window of "
                f"seq_len + 1 = {self.seq_len + 1}; add text or lower data.seq_len"
            )
        digest = lambda *parts: hashlib.sha256(json.dumps(parts).encode()).hexdigest()  # noqa: E731
        checksums = {split: [s.sha256 for s in files] for split, files in split_sources.items()}
        val_from = checksums.get("val") or ["last tenth of", checksums["train"]]
        split_sha256 = {"train": digest(checksums["train"], "val" in checksums), "val": digest(val_from)}
        if self.test_split == "val":
            test = None
        elif test is None:  # the validation tokens' second half is the test split
            half = len(val) // 2
            val, test = val.part(0, half), val.part(half, len(val))
            split_sha256 |= {"val": digest(val_from, "first half"), "test": digest(val_from, "second half")}
        else:
            split_sha256["test"] = digest(checksums["test"])
        return _Tokenized(store.tokenizer, train, val, test, digest(checksums), split_sha256)

    @property
    def data_checksum(self) -> str:
        """SHA-256 (hex) of the raw corpus data."""
        return self._data.sha256

    @property
    def split_checksums(self) -> dict[str, str]:
        """SHA-256 (hex) of each split's text (train, val and, held out, test): recorded in `run.json`."""
        return self._data.split_sha256

    @property
    def val_ids(self) -> Tensor:
        """The validation tokens every eval length sees: ``n + 1`` tokens, ``n`` of them predicted."""
        return self._evaluated(self._data.val_ids, "validation")

    @property
    def test_ids(self) -> Tensor:
        """The test tokens every eval length sees (the validation tokens with ``test_split: val``)."""
        ids = self._data.test_ids
        return self.val_ids if ids is None else self._evaluated(ids, "test")

    def _evaluated(self, ids: Tensor, split: str) -> Tensor:
        step = math.lcm(*self.eval_lengths)
        n = min(self.val_tokens, len(ids) - 1) // step * step
        if n == 0:
            raise ValueError(
                f"{split} split has {len(ids)} tokens: too few for one window of every eval length "
                f"{self.eval_lengths} (least common multiple {step})"
            )
        return ids[: n + 1]

    def prepare_data(self) -> None:
        _ = self._data  # downloads (rank 0 first in distributed runs) and tokenizes

    def train_dataloader(self) -> DataLoader:
        n = self.train_batches_per_epoch * self.global_batch_size
        dataset = RandomWindows(self._data.train_ids, self.seq_len, self.seed, n)
        sampler = GlobalIndexSampler(n, start=self._samples_consumed())
        return self._train_loader(dataset, BatchSampler(sampler, self.global_batch_size, drop_last=False))

    def _samples_consumed(self) -> int:
        """Training samples drawn before now: 0 for a new run; for a run restored from a checkpoint,
        its optimizer steps' worth, so the batch at every global step is the same with or without
        the restart."""
        trainer = self.trainer
        if trainer is None:
            return 0
        return trainer.global_step * trainer.accumulate_grad_batches * self.global_batch_size

    def val_dataloader(self) -> list[DataLoader]:
        ids = self.val_ids
        return [self._eval_loader(FixedWindows(ids, length)) for length in self.eval_lengths]

    def test_dataloader(self) -> list[DataLoader]:
        ids = self.test_ids
        return [self._eval_loader(FixedWindows(ids, length)) for length in self.eval_lengths]

    def predict_dataloader(self) -> DataLoader:
        if self.predict_file:
            texts, source = read_lines(self.predict_file), f"predict_file {self.predict_file}"
        else:
            # at most half a training window: a prompt leaves room for what a model with learned positions adds
            texts = text_prompts(self._val_text(), chars=min(PROMPT_CHARS, self.seq_len // 2))
            source = "default prompts (validation text)"
        return self._eval_loader(encode_inputs(self.tokenizer, texts, source), collate_fn=collate_lists)

    def _val_text(self) -> str:
        """Validation text to take default prompts from (a store's: its first tokens, decoded)."""
        if self.corpus == FILES:
            return self.tokenizer.decode(self._data.val_ids[:PROMPT_TEXT_TOKENS].tolist())
        return self._corpus.val
