"""Where a `TextDataModule`'s tokens come from, behind one interface (`TextSource`): a built-in corpus (the
registry `CORPORA`: its text in memory, the tokenizer fitted on its training part) or the user's own files
(`corpus: files`, tokenized once into a token store read window by window)."""

import hashlib
import json
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from pathlib import Path
from typing import Literal, Protocol, get_args

import torch
from torch import Tensor

from datamodules.download import resolve, sha256_bytes, sha256_file
from datamodules.text_files import Source, sources
from datamodules.token_store import TokenArray, TokenStore, open_store, sample_for_tokenizer, store_key
from datamodules.tokenization import Tokenizer, build_tokenizer, load_tokenizer

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
    "https://huggingface.co/datasets/ggml-org/ci/resolve/927b3642933080f1b0e811e2f916e14c292992f9/wikitext-2-raw-v1.zip"
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


@dataclass(frozen=True)
class TokenizedText:
    tokenizer: Tokenizer
    train_ids: Tensor | TokenArray  # (N_train,) long
    val_ids: Tensor | TokenArray  # (N_val,) long, the whole validation split
    test_ids: Tensor | TokenArray | None  # (N_test,) long, the held-out test split; None with test_split "val"
    sha256: str
    split_sha256: dict[str, str]  # of each split's text, as the run used it


@dataclass(frozen=True)
class TokenizerSettings:
    """How a source gets its tokenizer: a saved one (`file`), or one of `kind` fitted on the training text."""

    kind: TextTokenizerName
    bpe_vocab_size: int
    file: str | None = None

    def load(self) -> Tokenizer:
        return load_tokenizer(self.file, self.kind)


class TextSource(Protocol):
    """The text a `TextDataModule` reads: its tokenizer, its tokenized splits, validation text for prompts, and
    the token store it reads from (None for a corpus held in memory)."""

    store: TokenStore | None

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def tokenized(self) -> TokenizedText: ...

    def val_text(self) -> str: ...


class BuiltInCorpus:
    """A corpus of `CORPORA`, held in memory; `test_split: held_out` its official test part or the second half
    of its validation text."""

    store = None  # held in memory

    def __init__(self, name: CorpusName, data_dir: str | None, cache_dir: str, tokenizer: TokenizerSettings,
                 test_split: str) -> None:  # fmt: skip
        self.name, self.data_dir, self.cache_dir = name, data_dir, cache_dir
        self.settings, self.test_split = tokenizer, test_split

    @cached_property
    def corpus(self) -> Corpus:
        return CORPORA[self.name](self.data_dir, self.cache_dir)

    @cached_property
    def tokenizer(self) -> Tokenizer:
        # a saved tokenizer needs no corpus: predicting from `predict_file` then reads no data at all
        if self.settings.file:
            return self.settings.load()
        # line by line: BPE trains and encodes lines in parallel; lines keep their newlines
        lines = self.corpus.train.splitlines(keepends=True)
        return build_tokenizer(self.settings.kind, lines, self.settings.bpe_vocab_size)

    @cached_property
    def tokenized(self) -> TokenizedText:
        corpus, tok = self.corpus, self.tokenizer

        def as_tensor(text: str) -> Tensor:
            ids = chain.from_iterable(tok.encode_batch(text.splitlines(keepends=True)))
            return torch.tensor(list(ids), dtype=torch.long)

        val, test = corpus.held_out() if self.test_split == "held_out" else (corpus.val, None)
        texts = {"train": corpus.train, "val": val} | ({"test": test} if test is not None else {})
        split_sha256 = {name: sha256_bytes(text.encode()) for name, text in texts.items()}
        test_ids = None if test is None else as_tensor(test)
        return TokenizedText(tok, as_tensor(corpus.train), as_tensor(val), test_ids, corpus.sha256, split_sha256)

    def val_text(self) -> str:
        return self.corpus.val


class FileCorpus:
    """The user's own files (`corpus: files`), tokenized once into a token store that every run and process
    reads window by window; `test_split: held_out` the test files or the validation tokens' second half."""

    def __init__(self, files: dict[str, str | list[str] | None], token_store: str | None, cache_dir: str,
                 tokenizer: TokenizerSettings, sample_bytes: int, seq_len: int, test_split: str) -> None:  # fmt: skip
        self.files, self.token_store, self.cache_dir = files, token_store, cache_dir
        self.settings, self.sample_bytes, self.seq_len, self.test_split = tokenizer, sample_bytes, seq_len, test_split

    @cached_property
    def sources(self) -> dict[str, list[Source]]:
        return {split: sources(value, split) for split, value in self.files.items() if value}

    @cached_property
    def store(self) -> TokenStore:
        settings = self.settings
        tokenizer_spec = (
            {"file": sha256_file(settings.file)} if settings.file
            else {"kind": settings.kind, "sample_bytes": self.sample_bytes}
            | ({"vocab_size": settings.bpe_vocab_size} if settings.kind == "bpe" else {})
        )  # fmt: skip
        split_sources = self.sources
        default = Path(self.cache_dir).expanduser() / "token_stores" / store_key(split_sources, tokenizer_spec)
        held_out = "val" not in split_sources

        def fit() -> Tokenizer:
            sample = list(sample_for_tokenizer(split_sources["train"], self.sample_bytes, held_out))
            return build_tokenizer(settings.kind, sample, settings.bpe_vocab_size)

        return open_store(
            Path(self.token_store).expanduser() if self.token_store else default, split_sources, make_tokenizer=fit,
            given=settings.load() if settings.file else None, given_name=f"data.tokenizer_file {settings.file}",
            workers=len(os.sched_getaffinity(0)),
        )  # fmt: skip

    @property
    def tokenizer(self) -> Tokenizer:
        return self.store.tokenizer

    @cached_property
    def tokenized(self) -> TokenizedText:
        store, split_sources = self.store, self.sources
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
        return TokenizedText(store.tokenizer, train, val, test, digest(checksums), split_sha256)

    def val_text(self) -> str:
        """Its first tokens, decoded: a store holds no text."""
        return self.tokenizer.decode(self.tokenized.val_ids[:PROMPT_TEXT_TOKENS].tolist())
