"""Samplers whose order is a pure function of (seed, epoch), so a resumed run sees the same data.

Lightning calls ``set_epoch`` on ``loader.sampler`` and ``loader.batch_sampler.sampler`` at the start
of every epoch (also after a restore). A run restored mid-epoch rebuilds its loader and Lightning
restarts a plain DataLoader from the epoch's first batch, so :class:`GlobalIndexSampler` also takes
the position to start from.
"""

from collections.abc import Callable, Iterator, Sequence
from itertools import islice

import torch
from torch.utils.data import BatchSampler, Sampler

_MASK64 = (1 << 64) - 1


def mix(*values: int) -> int:
    """Hash integers to a 63-bit seed (splitmix64 finaliser), stable across processes and runs.

    Python's ``hash`` is salted per process for str and not designed for seeds; this is not.
    """
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (v & _MASK64)) * 0xBF58476D1CE4E5B9 & _MASK64
        h = (h ^ (h >> 31)) * 0x94D049BB133111EB & _MASK64
        h ^= h >> 29
    return h >> 1  # torch.Generator.manual_seed wants a value that fits int64


# A held-out test split drawn at random is drawn with this seed, never the run's: every run and every search seed
# is tested on the same examples, and validation is drawn from what is left, so no validation split the suite can
# draw (any seed) meets it (tests/datamodules/test_test_splits.py)
TEST_SPLIT_SEED = 0


def generator(*values: int) -> torch.Generator:
    """A CPU generator seeded from ``mix(*values)``."""
    return torch.Generator().manual_seed(mix(*values))


class EpochSampler(Sampler[int]):
    """Indices ``0..n-1``, shuffled by ``(seed, epoch)`` or in order.

    Args:
        num_samples: dataset length.
        seed: run seed.
        shuffle: permute each epoch; in order otherwise.
    """

    def __init__(self, num_samples: int, seed: int, shuffle: bool = True) -> None:
        self.num_samples, self.seed, self.shuffle, self.epoch = num_samples, seed, shuffle, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        if not self.shuffle:
            return iter(range(self.num_samples))
        return iter(torch.randperm(self.num_samples, generator=generator(self.seed, self.epoch)).tolist())


class GlobalIndexSampler(Sampler[int]):
    """Global sample indices ``epoch * n .. epoch * n + n - 1`` for datasets that draw sample i from i.

    With a dataset whose item i is a pure function of (seed, i), epoch e sees fresh samples and the
    same ones after a restart.

    Args:
        num_samples: samples per epoch.
        start: global index of the first sample to yield: a run restored mid-epoch passes the
            samples it has consumed, so it goes on with the batch it would have seen next
            (``__len__`` stays one epoch, matching Lightning's restored count of the epoch's batches).
    """

    def __init__(self, num_samples: int, start: int = 0) -> None:
        # the epoch of `start`, before Lightning sets it: on a restore, loader workers prefetch indices as
        # Lightning creates the epoch's iterator, before its `set_epoch`
        self.num_samples, self.start, self.epoch = num_samples, start, start // num_samples

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        begin = self.epoch * self.num_samples
        return iter(range(max(begin, self.start), begin + self.num_samples))


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of similar length, deterministic in (seed, epoch).

    Each epoch: take the ``sampler``'s permutation, cut it into chunks of ``chunk_batches``
    batches, sort each chunk by length (less padding), cut it into batches, then shuffle the batch
    order so lengths do not rise and fall in a pattern the optimiser could feel.

    Args:
        sampler: an :class:`EpochSampler`; kept as ``.sampler`` so Lightning sets its epoch.
        lengths: length of every example (indexable by dataset index).
        batch_size: examples per batch; the last batch of a chunk may be smaller.
        chunk_batches: batches per sorting chunk.
    """

    def __init__(
        self, sampler: EpochSampler, lengths: Sequence[int], batch_size: int, chunk_batches: int = 100
    ) -> None:
        self.sampler, self.lengths = sampler, lengths
        self.batch_size, self.chunk_batches = batch_size, chunk_batches

    def _batches(self) -> list[list[int]]:
        order = list(self.sampler)
        chunk = self.batch_size * self.chunk_batches
        key: Callable[[int], int] = self.lengths.__getitem__
        batches = []
        for c in range(0, len(order), chunk):
            sorted_chunk = sorted(order[c : c + chunk], key=key)  # stable: ties keep the random order
            batches += [sorted_chunk[b : b + self.batch_size] for b in range(0, len(sorted_chunk), self.batch_size)]
        # a stream distinct from the permutation's (same seed and epoch, extra tag)
        perm = torch.randperm(len(batches), generator=generator(self.sampler.seed, self.sampler.epoch, 1))
        return [batches[i] for i in perm.tolist()]

    def __len__(self) -> int:
        chunk = self.batch_size * self.chunk_batches
        n = len(self.sampler)
        full, rest = divmod(n, chunk)
        return full * self.chunk_batches + -(-rest // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._batches())


class ResumeBatches(Sampler[list[int]]):
    """Skips, once, the batches a run restored mid-epoch has already trained on, so the batch at
    every global step is the same with or without the restart (Lightning restarts a plain loader's
    epoch from its first batch).

    Args:
        batch_sampler: the epoch's batches; its ``.sampler`` (an :class:`EpochSampler`) is exposed
            so Lightning still sets the epoch.
        skip: batches to skip in the first epoch iterated (see :func:`batches_done_this_epoch`).
    """

    def __init__(self, batch_sampler: Sampler[list[int]], skip: int) -> None:
        self.batch_sampler, self.skip = batch_sampler, skip
        self.sampler = batch_sampler.sampler

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[list[int]]:
        skip, self.skip = self.skip, 0
        return islice(iter(self.batch_sampler), skip, None)


def batches_done_this_epoch(trainer, batches_per_epoch: int) -> int:
    """Training batches of the current epoch already consumed: 0 for a new run or no trainer."""
    if trainer is None:
        return 0
    done = trainer.global_step * trainer.accumulate_grad_batches - trainer.current_epoch * batches_per_epoch
    return max(0, done)


def resumable_batches(sampler: EpochSampler, batch_size: int, trainer=None) -> ResumeBatches:
    """Batches of ``sampler`` (last one partial) that resume mid-epoch when ``trainer`` was restored."""
    if trainer is not None:
        # the restored epoch, before Lightning sets it: loader workers prefetch indices as Lightning creates the
        # resumed epoch's iterator, before its `set_epoch` (the batches then came from epoch 0's permutation)
        sampler.set_epoch(trainer.current_epoch)
    batches = BatchSampler(sampler, batch_size, drop_last=False)
    return ResumeBatches(batches, batches_done_this_epoch(trainer, len(batches)))


class RankSlices(Sampler[list[int]]):
    """This process's share of every global batch: the same global batches on 1 or N processes.

    The wrapped sampler yields global batches (``batch_size × world_size`` examples, as one process
    with the whole batch would draw them); rank r takes the r-th of ``world_size`` contiguous slices
    (sizes differ by at most one when the batch does not divide). The losses divide by the global
    count (`TaskModule.global_mean`), so DDP's gradient average is the gradient of the global batch.
    Lightning's DistributedSampler is not used (`use_distributed_sampler: false`): it would shard a
    permutation per process instead, and pad.

    Args:
        batches: global batches; its ``.sampler`` is exposed so Lightning still sets the epoch.
        rank: this process's global rank.
        world_size: processes in the run.
    """

    def __init__(self, batches: Sampler[list[int]], rank: int = 0, world_size: int = 1) -> None:
        self.batches, self.rank, self.world_size = batches, rank, world_size
        self.sampler = getattr(batches, "sampler", None)

    def __len__(self) -> int:
        return len(self.batches)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.batches:
            if len(batch) < self.world_size:  # a last global batch too small to give every process one
                return
            size, extra = divmod(len(batch), self.world_size)
            start = self.rank * size + min(self.rank, extra)
            yield list(batch[start : start + size + (self.rank < extra)])


class RoundRobinBatches(Sampler[list[int]]):
    """Evaluation batches in order, batch k to rank k mod world_size: every example is evaluated
    exactly once (a DistributedSampler pads the last batch with repeated examples, which would count
    them twice in the metrics). Ranks may get one batch fewer; the metrics sum their states at the end.
    A set too small to give every rank a batch is cut into smaller batches (Lightning refuses a rank
    with none); the metrics do not depend on the batching.

    Args:
        num_samples: dataset length.
        batch_size: examples per batch (the last one partial).
        rank: this process's global rank.
        world_size: processes in the run.
    """

    def __init__(self, num_samples: int, batch_size: int, rank: int = 0, world_size: int = 1) -> None:
        if num_samples < world_size:
            raise ValueError(
                f"{num_samples} evaluation examples cannot be shared by {world_size} processes; "
                "use more evaluation data or fewer processes"
            )
        batch_size = min(batch_size, -(-num_samples // world_size))
        self.batches = BatchSampler(range(num_samples), batch_size, drop_last=False)
        self.rank, self.world_size = rank, world_size

    def __len__(self) -> int:
        return len(range(self.rank, len(self.batches), self.world_size))

    def __iter__(self) -> Iterator[list[int]]:
        return islice(iter(self.batches), self.rank, None, self.world_size)
