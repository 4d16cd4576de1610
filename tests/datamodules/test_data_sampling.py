"""Samplers, the Lightning fit loop driving them, and the CLI parsing the DataModules' signatures."""

from argparse import ArgumentError

import lightning.pytorch as pl
import pytest
import torch
from jsonargparse import ArgumentParser

from datamodules import AlgorithmicDataModule, ImageDataModule, TextDataModule, TranslationDataModule
from datamodules.sampling import (
    BucketBatchSampler,
    EpochSampler,
    GlobalIndexSampler,
    RankSlices,
    RoundRobinBatches,
    mix,
)


def test_mix_is_stable_and_fits_int64() -> None:
    assert mix(0, 1) == mix(0, 1) != mix(1, 0)
    assert 0 <= mix(2**70, -5) < 2**63
    assert mix(0, 1) == 6431972100845284338  # golden value: changing mix changes every run's data


def test_epoch_sampler() -> None:
    s = EpochSampler(10, seed=0)
    e0 = list(s)
    assert sorted(e0) == list(range(10)) and e0 == list(s)
    s.set_epoch(1)
    assert list(s) != e0 and list(EpochSampler(10, 0, shuffle=False)) == list(range(10))


def test_global_index_sampler() -> None:
    s = GlobalIndexSampler(4)
    s.set_epoch(2)
    assert list(s) == [8, 9, 10, 11] and len(s) == 4


def test_bucket_batch_sampler_len_matches_iteration() -> None:
    for n, bs, chunk in [(100, 7, 3), (21, 7, 3), (5, 8, 2)]:
        s = BucketBatchSampler(EpochSampler(n, 0), list(range(n)), bs, chunk)
        batches = list(s)
        assert len(batches) == len(s) and sorted(i for b in batches for i in b) == list(range(n))


class Recorder(pl.LightningModule):
    """Records the batches Lightning feeds it; learns nothing."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key, self.w = key, torch.nn.Parameter(torch.zeros(()))
        self.train_batches: list[tuple[int, torch.Tensor]] = []
        self.val_loaders: set[int] = set()

    def training_step(self, batch, batch_idx):
        self.train_batches.append((self.current_epoch, batch[self.key]))
        return self.w * 0.0

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self.val_loaders.add(dataloader_idx)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def fit(dm: pl.LightningDataModule, key: str) -> Recorder:
    model = Recorder(key)
    trainer = pl.Trainer(
        max_epochs=2,
        limit_train_batches=2,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=dm)
    return model


@pytest.mark.filterwarnings("ignore::UserWarning")  # few workers / small limits
def test_lightning_sets_epochs_for_text() -> None:
    dm = TextDataModule(seq_len=8, eval_lengths=[8, 16], batch_size=2, train_batches_per_epoch=5)
    model = fit(dm, "input_ids")
    assert model.val_loaders == {0, 1}  # one loader per eval length
    dataset = dm.train_dataloader().dataset
    epoch1 = [x for epoch, x in model.train_batches if epoch == 1]
    # epoch 1 starts at global sample index 1 * 5 * 2 = 10: fresh windows, reproducible after a restart
    assert torch.equal(epoch1[0][0], dataset[10]["input_ids"])


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_lightning_sets_epochs_for_bucketed_translation() -> None:
    dm = TranslationDataModule(split="length", batch_size=8)
    model = fit(dm, "src_ids")
    loader = dm.train_dataloader()
    loader.batch_sampler.sampler.set_epoch(1)
    epoch1 = [x for epoch, x in model.train_batches if epoch == 1]
    assert torch.equal(epoch1[0], next(iter(loader))["src_ids"])


@pytest.mark.parametrize(
    ("cls", "args", "attr", "value", "bad"),
    [
        (TextDataModule, ["--corpus=wikitext2", "--eval_lengths=[16, 32]"], "eval_lengths", [16, 32], "--corpus=x"),
        (TranslationDataModule, ["--dataset=multi30k", "--tokenizer=bpe"], "tokenizer", "bpe", "--split=x"),
        (ImageDataModule, ["--dataset=cifar10", "--augment=false"], "augment", False, "--dataset=x"),
        (AlgorithmicDataModule, ["--task=addition", "--test_max_len=30"], "test_max_len", 30, "--task=x"),
    ],
)
def test_signatures_parse_as_cli_flags(cls: type, args: list[str], attr: str, value: object, bad: str) -> None:
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls)
    assert parser.parse_args(args)[attr] == value
    with pytest.raises(ArgumentError, match="Literal"):  # choices are enforced
        parser.parse_args([bad])


def test_restored_run_resumes_mid_epoch_for_every_epoch_sampled_datamodule():
    """A trainer restored at global step k gets, as its next batch, the batch k of the epoch."""
    from types import SimpleNamespace

    for make in (lambda: ImageDataModule(batch_size=32), lambda: AlgorithmicDataModule(num_train=500, batch_size=32)):
        fresh = make()
        batches = list(fresh.train_dataloader())  # epoch 0, 16 batches
        restored = make()
        restored.trainer = SimpleNamespace(
            global_step=len(batches) + 3, accumulate_grad_batches=1, current_epoch=1, global_rank=0, world_size=1
        )
        loader = restored.train_dataloader()
        loader.batch_sampler.sampler.set_epoch(1)
        fresh_loader = fresh.train_dataloader()
        fresh_loader.batch_sampler.sampler.set_epoch(1)
        expected = list(fresh_loader)[3]
        got = next(iter(loader))
        assert all(torch.equal(expected[k], got[k]) for k in expected if isinstance(expected[k], torch.Tensor))
        assert len(list(loader)) == len(batches)  # the skip happens once; the next epoch is whole


@pytest.mark.parametrize(
    "make",
    [
        lambda: ImageDataModule(batch_size=32),
        lambda: TextDataModule(batch_size=4, seq_len=16, train_batches_per_epoch=16),
    ],
    ids=["epoch_sampled", "index_sampled"],
)
def test_a_restored_loader_with_workers_starts_in_its_epoch_before_lightning_sets_it(make):
    """Loader workers prefetch indices as Lightning creates a resumed epoch's iterator, before its `set_epoch`:
    the restored loader must already be in the restored epoch (it was in epoch 0: another run's batches)."""
    from types import SimpleNamespace

    fresh = make()
    fresh_loader = fresh.train_dataloader()
    fresh_loader.batch_sampler.sampler.set_epoch(1)
    expected = list(fresh_loader)[3]
    restored = make()
    restored.num_workers = 2
    restored.trainer = SimpleNamespace(global_step=len(fresh_loader) + 3, accumulate_grad_batches=1, current_epoch=1,
                                       global_rank=0, world_size=1)  # fmt: skip
    got = next(iter(restored.train_dataloader()))  # no set_epoch: as Lightning's resumed iterator starts
    assert all(torch.equal(expected[k], got[k]) for k in expected if isinstance(expected[k], torch.Tensor))


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("n, batch", [(10, 4), (12, 4), (5, 2), (3, 8)])
def test_round_robin_evaluates_every_example_once(n, batch, world):
    if n < world:
        pytest.skip("fewer examples than processes")
    shards = [list(RoundRobinBatches(n, batch, rank, world)) for rank in range(world)]
    assert all(shards), "every process gets at least one batch"
    seen = sorted(i for shard in shards for b in shard for i in b)
    assert seen == list(range(n))  # no example dropped, none repeated (a DistributedSampler pads)
    assert [len(list(RoundRobinBatches(n, batch, r, world))) for r in range(world)] == [len(s) for s in shards]


def test_round_robin_refuses_fewer_examples_than_processes():
    with pytest.raises(ValueError, match="cannot be shared by 3 processes"):
        RoundRobinBatches(2, 4, 0, 3)


@pytest.mark.parametrize("world", [2, 3])
def test_rank_slices_rebuild_the_global_batches(world):
    """The processes' slices of each step, put together, are the batch one process would train on."""
    global_batches = [[7, 3, 9, 1, 4, 8], [2, 6, 5, 0, 11, 10], [12, 13, 14, 15]]
    slices = [list(RankSlices(global_batches, rank, world)) for rank in range(world)]
    for step, batch in enumerate(global_batches):
        assert [i for rank in range(world) for i in slices[rank][step]] == batch
    assert list(RankSlices(global_batches, 0, 1)) == global_batches
