"""Language-modelling text: a corpus registry, a tokenizer fitted on its training part, and
training windows that are a pure function of (seed, sample index)."""

import math
from functools import cached_property

from jsonargparse.typing import PositiveInt
from torch import Tensor
from torch.utils.data import BatchSampler, DataLoader, Dataset

from datamodules.base import SuiteDataModule, TestSplit, check_own_data, checked_test_split
from datamodules.predict_inputs import PROMPT_CHARS, collate_lists, encode_inputs, read_lines, text_prompts
from datamodules.sampling import GlobalIndexSampler, mix
from datamodules.text_sources import (  # noqa: F401 - the corpus registry and its names, re-exported
    CORPORA,
    FILES,
    TINYSHAKESPEARE_SHA256,
    BuiltInCorpus,
    CorpusName,
    FileCorpus,
    TextSource,
    TextTokenizerName,
    TokenizedText,
    TokenizerSettings,
)
from datamodules.token_store import TokenArray, TokenStore
from datamodules.tokenization import Tokenizer, TokenizerFields


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
    def _source(self) -> TextSource:
        """The one place the corpus is chosen: every method below reads this source."""
        settings = TokenizerSettings(self.tokenizer_name, self.bpe_vocab_size, self.tokenizer_file)
        if self.corpus == FILES:
            return FileCorpus(self.files, self.token_store, self.cache_dir, settings, self.tokenizer_sample_bytes,
                              self.seq_len, self.test_split)  # fmt: skip
        return BuiltInCorpus(self.corpus, self.data_dir, self.cache_dir, settings, self.test_split)

    @property
    def tokenizer(self) -> Tokenizer:
        return self._source.tokenizer

    @property
    def prepared_store(self) -> TokenStore | None:
        """The token store of `corpus: files` (`cli.py prepare` reports it); None for a built-in corpus."""
        return self._source.store

    @property
    def _data(self) -> TokenizedText:
        # built on first use (a property read by the CLI, prepare_data or setup), then kept by the source
        return self._source.tokenized

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
            files = "val_files" if split == "validation" else f"{split}_files"
            raise ValueError(
                f"{split} split has {len(ids)} tokens: too few for one window of every eval length "
                f"{self.eval_lengths} (least common multiple {step}); give more text (or the split's own files, "
                f"data.{files}), or shorter data.eval_lengths"
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
            texts = text_prompts(self._source.val_text(), chars=min(PROMPT_CHARS, self.seq_len // 2))
            source = "default prompts (validation text)"
        return self._eval_loader(encode_inputs(self.tokenizer, texts, source), collate_fn=collate_lists)
