"""The base every DataModule of the suite subclasses: the fields they share and the loaders built from them."""

import warnings
from collections.abc import Sequence
from typing import Any, Literal, get_args

import lightning.pytorch as pl
import torch
from jsonargparse.typing import NonNegativeInt, PositiveInt
from torch.utils.data import DataLoader, Dataset, Sampler

from contract.errors import ConfigError
from datamodules.download import DEFAULT_CACHE_DIR
from datamodules.sampling import EpochSampler, RankSlices, RoundRobinBatches, resumable_batches

# Lightning cannot see that RoundRobinBatches returns every index once (see `_eval_loader`) and warns so at
# every `predict` on several processes (one process uses a plain loader, which it does not warn about)
warnings.filterwarnings("ignore", message=".*custom batch sampler `RoundRobinBatches` for prediction.*")

# What `cli.py test` evaluates: `val`, what runs measured before held-out splits existed (so they keep meaning
# it); `held_out`, a test split that no run selects on (a tuned sweep needs it). Each DataModule that has the
# field says where its held-out split comes from.
TestSplit = Literal["val", "held_out"]


def checked_test_split(value: Any) -> TestSplit:
    """`value` if it is a `TestSplit`, else a ConfigError naming the choices."""
    if value not in get_args(TestSplit):
        raise ConfigError(f"data.test_split={value!r} is not valid; choose one of {list(get_args(TestSplit))}")
    return value


def check_own_data(field: str, value: str, own: str, paths: dict[str, Any], what: str) -> None:
    """The user's own data is asked for both ways or not at all: ``data.<field>=<own>`` needs the training paths
    (``what`` says what they are), and paths given need ``data.<field>=<own>``.

    Args:
        field: the DataModule's name field (``corpus``, ``dataset``).
        value: its value.
        own: the value that reads the user's own data (``files``, ``folder``).
        paths: each path flag (``train_files``, ``val_dir``, ...) and its value; the first is required.
    """
    required = next(iter(paths))
    if value == own and not paths[required]:
        raise ConfigError(f"data.{field}={own} needs data.{required}: {what}")
    given = [f"data.{key}" for key, path in paths.items() if path]
    if value != own and given:
        raise ConfigError(f"{', '.join(given)} given with data.{field}={value}; set data.{field}={own} to use them")


class SuiteDataModule(pl.LightningDataModule):
    """Batch size, seed, workers and data location, shared by every DataModule.

    A subclass lists its own flags and ``batch_size`` (with its own default) and passes the rest on as
    ``**kwargs``: jsonargparse follows ``super().__init__(**kwargs)`` into this signature, so the fields
    below are CLI flags of every DataModule, after its own. Each also exposes ``data_checksum``, the
    SHA-256 of its raw data that ``RunMetadata`` records.

    Args:
        batch_size: examples per batch.
        seed: seeds the data's randomness (the DataModule's docstring says what: splits, generation,
            order) and the loaders' workers.
        num_workers: DataLoader workers.
        data_dir: a local copy of the data's files (the DataModule's docstring says which); nothing is
            downloaded when it is set.
        cache_dir: where downloads are kept.
    """

    def __init__(
        self,
        batch_size: PositiveInt,
        seed: int = 0,
        num_workers: NonNegativeInt = 0,
        data_dir: str | None = None,
        cache_dir: str = DEFAULT_CACHE_DIR,
    ) -> None:
        super().__init__()
        # no save_hyperparameters(): LightningCLI saves the config, and Lightning refuses to log
        # DataModule and LightningModule hparams that share a key (seed, batch_size) with other values
        self.batch_size, self.seed, self.num_workers = batch_size, seed, num_workers
        self.data_dir, self.cache_dir = data_dir, cache_dir

    def _loader(self, dataset: Dataset | Sequence, **kwargs) -> DataLoader:
        """A DataLoader over ``dataset`` (a list is a map-style dataset) with the module's workers;
        ``kwargs`` choose the batching."""
        return DataLoader(
            dataset,  # type: ignore[arg-type]
            num_workers=self.num_workers,
            generator=torch.Generator().manual_seed(self.seed),  # seeds the workers (and their augmentations)
            **kwargs,
        )

    @property
    def ranks(self) -> tuple[int, int]:
        """(this process's global rank, processes in the run); (0, 1) before a trainer is attached."""
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    @property
    def global_batch_size(self) -> int:
        """Examples per optimizer step over all processes: `batch_size` is per process, as in Lightning."""
        return self.batch_size * self.ranks[1]

    def _train_loader(self, dataset: Dataset | Sequence, global_batches: Sampler[list[int]], **kwargs) -> DataLoader:
        """Training batches: this process's slice of each global batch (the same global batches on 1 or N
        processes)."""
        return self._loader(dataset, batch_sampler=RankSlices(global_batches, *self.ranks), **kwargs)

    def _eval_loader(self, dataset: Dataset | Sequence, **kwargs) -> DataLoader:
        """Evaluation batches of ``batch_size`` in order, shared out so every example is evaluated once."""
        if self.ranks[1] == 1:
            # one process: the same batches as RoundRobinBatches, from a plain loader, which Lightning's predict
            # loop can wrap to track indices without warning that a custom batch sampler might drop some
            return self._loader(dataset, batch_size=self.batch_size, shuffle=False, **kwargs)
        batches = RoundRobinBatches(len(dataset), self.batch_size, *self.ranks)  # type: ignore[arg-type]
        return self._loader(dataset, batch_sampler=batches, **kwargs)

    def _epoch_loader(self, dataset: Dataset | Sequence, shuffle: bool, **kwargs) -> DataLoader:
        """Training (``shuffle``): global batches shuffled by (seed, epoch), resuming mid-epoch after a
        restore; evaluation: in order, from the first batch."""
        if not shuffle:
            return self._eval_loader(dataset, **kwargs)
        sampler = EpochSampler(len(dataset), self.seed, shuffle)  # type: ignore[arg-type]
        return self._train_loader(dataset, resumable_batches(sampler, self.global_batch_size, self.trainer), **kwargs)
