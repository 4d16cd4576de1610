"""Algorithmic tasks for length generalisation with a decoder-only model.

An instance of length n is ``<bos> x_1..x_k <sep> y_1..y_m <eos>``; the loss is on the answer
(``y`` and ``<eos>``) only. Training uses lengths ``train_min_len..train_max_len``; validation
and test cover every length ``1..test_max_len``, so accuracy can be read per length, in and out of
the training range.
"""

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal, get_args

import torch
from jsonargparse.typing import PositiveInt
from torch import Tensor
from torch.utils.data import DataLoader

from contract.labels import IGNORE_INDEX
from datamodules.base import SuiteDataModule
from datamodules.download import sha256_bytes
from datamodules.sampling import TEST_SPLIT_SEED, generator
from datamodules.tokenization import SPECIALS

AlgorithmicTaskName = Literal["copy", "reverse", "addition"]

PAD, BOS, SEP, EOS, PLUS = map(SPECIALS["algorithmic"].index, ("<pad>", "<bos>", "<sep>", "<eos>", "+"))
NUM_SPECIALS = len(SPECIALS["algorithmic"])  # symbol s has token id NUM_SPECIALS + s


def _symbols(values: list[int]) -> list[int]:
    return [NUM_SPECIALS + v for v in values]


def _copy(n: int, base: int, g: torch.Generator) -> tuple[list[int], list[int]]:
    x = _symbols(torch.randint(base, (n,), generator=g).tolist())
    return x, x


def _reverse(n: int, base: int, g: torch.Generator) -> tuple[list[int], list[int]]:
    x = _symbols(torch.randint(base, (n,), generator=g).tolist())
    return x, x[::-1]


def _addition(n: int, base: int, g: torch.Generator) -> tuple[list[int], list[int]]:
    """``a + b`` for two n-digit numbers (leading zeros allowed), most significant digit first; the
    sum has a fixed n + 1 digits so its length depends on n only."""
    a, b = torch.randint(base, (2, n), generator=g).tolist()
    value = lambda digits: sum(d * base**i for i, d in enumerate(reversed(digits)))  # noqa: E731
    total = value(a) + value(b)
    y = [total // base**i % base for i in reversed(range(n + 1))]
    return [*_symbols(a), PLUS, *_symbols(b)], _symbols(y)


# (n, num_symbols, generator) -> (x, y) as token ids
TASKS: dict[AlgorithmicTaskName, Callable[[int, int, torch.Generator], tuple[list[int], list[int]]]] = {
    "copy": _copy,
    "reverse": _reverse,
    "addition": _addition,
}
assert set(TASKS) == set(get_args(AlgorithmicTaskName))
# random symbols an instance of length n draws, per n: its instances number num_symbols ** (that × n)
SYMBOLS_PER_LENGTH: dict[AlgorithmicTaskName, int] = {"copy": 1, "reverse": 1, "addition": 2}


@dataclass(frozen=True)
class Instance:
    tokens: list[int]  # <bos> x <sep> y <eos>
    answer_start: int  # index of y_1 in tokens
    length: int  # n


def make_instance(task: AlgorithmicTaskName, n: int, num_symbols: int, g: torch.Generator) -> Instance:
    x, y = TASKS[task](n, num_symbols, g)
    return Instance([BOS, *x, SEP, *y, EOS], len(x) + 2, n)


def collate_instances(batch: Sequence[Instance]) -> dict[str, Tensor]:
    """``input_ids`` (B, T) padded with PAD; ``labels`` (B, T) next tokens on answer positions
    (y and eos), ``IGNORE_INDEX`` elsewhere; ``lengths`` (B,) the instance length n."""
    T = max(len(inst.tokens) for inst in batch) - 1
    input_ids = torch.full((len(batch), T), PAD, dtype=torch.long)
    labels = torch.full((len(batch), T), IGNORE_INDEX, dtype=torch.long)
    for b, inst in enumerate(batch):
        seq = torch.tensor(inst.tokens, dtype=torch.long)
        input_ids[b, : len(seq) - 1] = seq[:-1]
        # position t predicts token t + 1: answer tokens start at answer_start, so from t = answer_start - 1 (<sep>)
        labels[b, inst.answer_start - 1 : len(seq) - 1] = seq[inst.answer_start :]
    return {"input_ids": input_ids, "labels": labels, "lengths": torch.tensor([i.length for i in batch])}


class AlgorithmicDataModule(SuiteDataModule):
    """Copy / reverse / multi-digit addition, generated from ``seed`` (see module docstring).

    Batches: ``{"input_ids": LongTensor(B, T), "labels": LongTensor(B, T), "lengths": LongTensor(B)}``.
    Vocabulary: the specials of ``SPECIALS["algorithmic"]`` (``<pad>``=0, ``<bos>``=1, ``<sep>``=2,
    ``<eos>``=3, ``+``=4), then ``num_symbols`` symbols (digits in base ``num_symbols`` for addition).
    ``seed`` seeds generation and shuffling; train, val and test use distinct streams, test the same for every
    seed (``TEST_SPLIT_SEED``), and validation never holds a test instance where the length has others. The data is
    generated: ``data_dir`` must be unset and ``cache_dir`` is ignored (both are still accepted, as
    committed run configs set them).

    Args:
        task: which task.
        train_min_len: shortest training instance length n.
        train_max_len: longest training instance length n.
        test_max_len: validation and test cover n = 1..test_max_len.
        num_train: training instances, lengths uniform in the training range.
        num_val_per_length: validation (and test) instances per length.
        num_symbols: alphabet size.
        batch_size: instances per batch.
        **kwargs: ``seed``, ``num_workers``, ``data_dir`` (unset), ``cache_dir`` (ignored): see
            :class:`SuiteDataModule`.
    """

    def __init__(
        self,
        task: AlgorithmicTaskName = "copy",
        train_min_len: int = 1,
        train_max_len: int = 10,
        test_max_len: int = 20,
        num_train: int = 20000,
        num_val_per_length: int = 50,
        num_symbols: int = 10,
        batch_size: PositiveInt = 64,
        **kwargs,
    ) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        if not 1 <= train_min_len <= train_max_len:
            raise ValueError(f"need 1 <= train_min_len <= train_max_len, got {train_min_len}, {train_max_len}")
        if self.data_dir is not None:
            raise ValueError(f"algorithmic data is generated, no file is read: unset data_dir (got {self.data_dir!r})")
        self.task, self.train_min_len, self.train_max_len = task, train_min_len, train_max_len
        self.test_max_len = test_max_len
        self.num_train, self.num_val_per_length, self.num_symbols = num_train, num_val_per_length, num_symbols

    @property
    def vocab_size(self) -> int:
        return NUM_SPECIALS + self.num_symbols

    @property
    def pad_token_id(self) -> int:
        return PAD

    @property
    def bos_token_id(self) -> int:
        return BOS

    @property
    def eos_token_id(self) -> int:
        return EOS

    @property
    def max_len(self) -> int:
        """Tokens in the longest instance, ``<eos>`` included (inputs are one shorter)."""
        n = max(self.train_max_len, self.test_max_len)
        return len(make_instance(self.task, n, self.num_symbols, torch.Generator()).tokens)  # length depends on n only

    def _generate(self, lengths: list[int], g: torch.Generator, avoid: frozenset | set = frozenset()) -> list[Instance]:
        """An instance per length; one in `avoid` is drawn again, unless `avoid` holds its length's every instance
        (n = 1 of 10 symbols has 10: there validation must repeat test instances)."""
        full = Counter(len(tokens) for tokens in avoid)
        out = []
        for n in lengths:
            instance = make_instance(self.task, n, self.num_symbols, g)
            space = self.num_symbols ** (SYMBOLS_PER_LENGTH[self.task] * n)
            while tuple(instance.tokens) in avoid and full[len(instance.tokens)] < space:
                instance = make_instance(self.task, n, self.num_symbols, g)
            out.append(instance)
        return out

    def _eval_lengths(self) -> list[int]:
        return [n for n in range(1, self.test_max_len + 1) for _ in range(self.num_val_per_length)]

    @cached_property
    def train_set(self) -> list[Instance]:
        g = generator(self.seed, 0, 0)
        lengths = torch.randint(self.train_min_len, self.train_max_len + 1, (self.num_train,), generator=g).tolist()
        return self._generate(lengths, generator(self.seed, 0))

    @cached_property
    def val_set(self) -> list[Instance]:
        """Seeded by the run; never a test instance where the length has others."""
        test = {tuple(i.tokens) for i in self.test_set}
        return self._generate(self._eval_lengths(), generator(self.seed, 1), avoid=test)

    @cached_property
    def test_set(self) -> list[Instance]:
        """The same for every run (``TEST_SPLIT_SEED``), so validation can avoid it whatever the seed."""
        return self._generate(self._eval_lengths(), generator(TEST_SPLIT_SEED, 2))

    @cached_property
    def data_checksum(self) -> str:
        """SHA-256 (hex) of the generated token sequences (train, val, test)."""
        lines = (" ".join(map(str, i.tokens)) for s in (self.train_set, self.val_set, self.test_set) for i in s)
        return sha256_bytes("\n".join(lines).encode())

    def train_dataloader(self) -> DataLoader:
        return self._epoch_loader(self.train_set, shuffle=True, collate_fn=collate_instances)

    def val_dataloader(self) -> DataLoader:
        return self._epoch_loader(self.val_set, shuffle=False, collate_fn=collate_instances)

    def test_dataloader(self) -> DataLoader:
        return self._epoch_loader(self.test_set, shuffle=False, collate_fn=collate_instances)
