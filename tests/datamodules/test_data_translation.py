from pathlib import Path
from typing import get_args

import numpy as np
import pytest
import torch

from contract.errors import ConfigError
from datamodules.translation import DATASETS, EncodedPairs, TranslationDataModule, TranslationDatasetName
from models.config import IGNORE_INDEX


def check_batch(batch: dict, dm: TranslationDataModule) -> None:
    B, S = batch["src_ids"].shape
    T = batch["tgt_in"].shape[1]
    assert batch["src_mask"].shape == (B, S) and batch["tgt_out"].shape == (B, T) and len(batch["tgt_text"]) == B
    mask = batch["src_mask"].bool()
    assert torch.all(batch["src_ids"][~mask] == dm.pad_token_id)
    assert torch.all(batch["src_ids"][mask] != dm.pad_token_id)
    assert torch.all(batch["tgt_in"][:, 0] == dm.bos_token_id)
    real = batch["tgt_out"] != IGNORE_INDEX
    # tgt_in is tgt_out shifted right by one: [bos] + target vs target + [eos]
    assert torch.equal(batch["tgt_in"][:, 1:][real[:, 1:]], batch["tgt_out"][:, :-1][real[:, 1:]])
    lengths = real.sum(1)
    assert torch.all(batch["tgt_out"][torch.arange(B), lengths - 1] == dm.eos_token_id)
    assert torch.all(batch["tgt_in"][~real] == dm.pad_token_id)
    assert batch["src_ids"].dtype == batch["tgt_in"].dtype == batch["tgt_out"].dtype == torch.long


def test_dataset_registry_matches_literal() -> None:
    assert set(DATASETS) | {"files"} == set(get_args(TranslationDatasetName))


def test_scan_properties_before_setup_and_special_ids() -> None:
    dm = TranslationDataModule(split="length")
    assert (dm.pad_token_id, dm.bos_token_id, dm.eos_token_id) == (0, 2, 3)
    assert dm.vocab_size == 5 + 13 + 6  # specials, 13 command words, 6 actions
    assert dm.tokenizer.decode(dm.tokenizer.encode("jump twice")) == "jump twice"
    assert len(dm.data_checksum) == 64


@pytest.mark.parametrize(("split", "sizes"), [("length", (16990, 1000, 3920)), ("simple", (16728, 1000, 4182))])
def test_scan_splits_and_batches(split: str, sizes: tuple[int, int, int]) -> None:
    dm = TranslationDataModule(split=split, batch_size=32)
    loaders = dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()
    assert tuple(len(loader.dataset) for loader in loaders) == sizes
    val_texts = {t for _, _, t in dm._data.val}
    assert val_texts <= {t for _, _, t in dm._data.test}  # val is a subset of test
    batch = next(iter(loaders[0]))
    check_batch(batch, dm)
    real = batch["tgt_out"][0][batch["tgt_out"][0] >= 0].tolist()
    assert dm.tokenizer.decode(real) == batch["tgt_text"][0]


@pytest.mark.parametrize("split", ["length", "cutoff26"])
def test_scan_held_out_validation_comes_from_training_pairs(split: str) -> None:
    """`test_split: held_out`: 1,000 training pairs become validation (in distribution, out of training);
    the test split is untouched, and shares no pair with validation or training."""
    plain = TranslationDataModule(split=split)
    held = TranslationDataModule(split=split, test_split="held_out")
    train, val, test = (set(getattr(held._pairs, name)) for name in ("train", "val", "test"))
    assert len(val) == 1000 and val <= set(plain._pairs.train) and not val & train
    assert train | val == set(plain._pairs.train)
    assert held._pairs.test == plain._pairs.test and not test & (train | val)
    longest = max(len(a.split()) for _, a in plain._pairs.train)
    assert max(len(a.split()) for _, a in val) <= longest  # validation in distribution: no test-length output
    assert held.split_checksums["test"] == plain.split_checksums["test"]
    assert held.split_checksums["val"] != plain.split_checksums["val"]
    assert TranslationDataModule(split=split, test_split="held_out", seed=1)._pairs.val != held._pairs.val


def test_a_bad_test_split_names_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"data.test_split='test' is not valid; choose one of \['val', 'held_out'\]"):
        TranslationDataModule(test_split="test")


def test_scan_training_order_is_deterministic_bucketed_and_reshuffled() -> None:
    def first(seed: int, epoch: int = 0) -> list[list[int]]:
        dm = TranslationDataModule(split="length", batch_size=64, seed=seed)
        loader = dm.train_dataloader()
        loader.batch_sampler.sampler.set_epoch(epoch)
        return list(loader.batch_sampler)

    a = first(0)
    assert a == first(0) and a != first(1) and a != first(0, epoch=1)
    assert sorted(i for b in a for i in b) == list(range(16990))  # every pair once per epoch
    dm = TranslationDataModule(split="length")
    lengths = [len(s) + len(t) for s, t, _ in dm._data.train]
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in a) / len(a)
    assert spread < 3  # bucketing: lengths within a batch are close (random batches: ~20)


def test_max_len_truncates() -> None:
    dm = TranslationDataModule(split="length", max_len=8, batch_size=512)
    batch = next(iter(dm.test_dataloader()))
    assert batch["tgt_in"].shape[1] == 8 and batch["tgt_out"].shape[1] == 8


@pytest.fixture(scope="module")
def multi30k(shared_data) -> TranslationDataModule:
    path = shared_data("multi30k")  # skips when the shared copy is absent
    return TranslationDataModule(dataset="multi30k", data_dir=str(path), bpe_vocab_size=1000, batch_size=16)


def test_multi30k_held_out_is_its_official_splits(multi30k: TranslationDataModule) -> None:
    held = TranslationDataModule(dataset="multi30k", data_dir=multi30k.data_dir, test_split="held_out")
    assert held._pairs == multi30k._pairs  # validation and test 2016 are disjoint already


def test_multi30k_sizes_and_alignment(multi30k: TranslationDataModule) -> None:
    data = multi30k._data
    assert (len(data.train), len(data.val), len(data.test)) == (29000, 1014, 1000)
    assert multi30k.tokenizer_name == "bpe" and multi30k.vocab_size == 1000
    first_src = multi30k.tokenizer.decode(data.train[0][0])
    assert first_src.startswith("Zwei junge weiße Männer") and data.train[0][2].startswith("Two young, White males")
    assert len(multi30k.data_checksum) == 64


def test_encoded_pairs_are_compact_and_the_same_in_any_chunking(multi30k: TranslationDataModule) -> None:
    """The pairs' ids live in flat uint16 arrays (not ~36-byte Python ints) and read back as the tokenizer's
    truncated ids with the target text, however many pairs are encoded at a time."""
    tok, pairs, train = multi30k.tokenizer, multi30k._pairs.train[:300], multi30k._data.train
    expected = [(tok.encode(s)[:64], tok.encode(t)[:63], t) for s, t in pairs]
    assert [train[i] for i in range(300)] == expected and train[-1] == train[len(train) - 1]
    for chunk in (7, 300, 1000):
        encode = lambda split: ((tok.encode(s)[:64], tok.encode(t)[:63]) for s, t in split)  # noqa: E731
        assert list(EncodedPairs(pairs, encode, tok.vocab_size, chunk=chunk)) == expected
    tokens = len(train.sources) + len(train.targets)
    assert train.sources.dtype == np.uint16 and train.nbytes == 2 * tokens + 2 * 8 * (len(train) + 1)
    assert train.lengths()[:300] == [len(s) + len(t) for s, t, _ in expected]
    with pytest.raises(IndexError):
        train[len(train)]
    wide = EncodedPairs([("a", "b")], lambda split: iter([([70000], [1])]), vocab_size=70001)
    assert wide.sources.dtype == np.int32 and list(wide) == [([70000], [1], "b")]


def test_multi30k_batches(multi30k: TranslationDataModule) -> None:
    for loader in (multi30k.train_dataloader(), multi30k.val_dataloader()):
        check_batch(next(iter(loader)), multi30k)


def test_multi30k_missing_data_dir(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="github.*multi30k") as e:
        _ = TranslationDataModule(dataset="multi30k", data_dir=str(tmp_path)).vocab_size
    assert str(tmp_path / "train.de.gz") in str(e.value)
