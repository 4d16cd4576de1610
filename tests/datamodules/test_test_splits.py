"""A test split never meets validation: for every DataModule (built-in data and the user's own files), the
held-out test split is the same whatever the run seed, and no validation split drawn with any of several seeds
shares an example with it. Checked by content (a pair, an image index, an instance's tokens, a text's span)."""

from __future__ import annotations

import pytest

from datamodules import AlgorithmicDataModule, ImageDataModule, TextDataModule, TranslationDataModule
from tests.datamodules.test_data_image_folder import write_digits
from tests.datamodules.test_data_parallel_files import files, parallel  # noqa: F401 - the fixture

SEEDS = (0, 1, 2, 7, 12345)  # run seeds and the search seeds studies use


def split_per_seed(make, read_val, read_test):
    """{seed: (validation examples, test examples)} of the DataModule `make(seed)` builds."""
    out = {}
    for seed in SEEDS:
        dm = make(seed)
        out[seed] = (read_val(dm), read_test(dm))
    return out


def assert_fixed_and_disjoint(per_seed) -> None:
    tests = {seed: test for seed, (_, test) in per_seed.items()}
    first = tests[SEEDS[0]]
    assert first and all(test == first for test in tests.values()), "the test split moved with the seed"
    for seed, (val, _) in per_seed.items():
        assert val and not (set(val) & set(first)), f"seed {seed}'s validation meets the test split"


@pytest.mark.parametrize("split", ["simple", "length", "cutoff26"])
def test_scan_held_out(split) -> None:
    make = lambda seed: TranslationDataModule(dataset="scan", split=split, test_split="held_out", seed=seed)  # noqa: E731
    assert_fixed_and_disjoint(split_per_seed(make, lambda dm: dm._pairs.val, lambda dm: dm._pairs.test))


def test_scan_simple_is_one_split_for_every_seed() -> None:
    pairs = [TranslationDataModule(dataset="scan", split="simple", seed=s)._pairs.test for s in (0, 3)]
    assert pairs[0] == pairs[1]


def test_parallel_files_without_val_or_test_files(parallel) -> None:  # noqa: F811 - the fixture
    make = lambda seed: TranslationDataModule(dataset="files", train_files=files(parallel, "train"), seed=seed,  # noqa: E731
                                              bpe_vocab_size=600)  # fmt: skip
    assert_fixed_and_disjoint(split_per_seed(make, lambda dm: dm._pairs.val, lambda dm: dm._pairs.test))


def test_multi30k_official_splits(shared_data) -> None:
    root = shared_data("multi30k")
    make = lambda seed: TranslationDataModule(dataset="multi30k", data_dir=str(root), seed=seed)  # noqa: E731
    per_seed = split_per_seed(make, lambda dm: dm._pairs.val, lambda dm: dm._pairs.test)
    assert_fixed_and_disjoint({s: per_seed[s] for s in SEEDS[:2]})


def test_digits() -> None:
    make = lambda seed: ImageDataModule(dataset="digits", seed=seed)  # noqa: E731
    ids = lambda split: lambda dm: dm.splits[split].tolist()  # noqa: E731 - indices into the one image array
    assert_fixed_and_disjoint(split_per_seed(make, ids("val"), ids("test")))


def test_image_folder_without_a_test_folder(tmp_path) -> None:
    write_digits(tmp_path / "train", 30)
    make = lambda seed: ImageDataModule(dataset="folder", train_dir=str(tmp_path / "train"), image_side=16, seed=seed)  # noqa: E731
    ids = lambda split: lambda dm: dm.splits[split].tolist()  # noqa: E731
    assert_fixed_and_disjoint(split_per_seed(make, ids("val"), ids("test")))


@pytest.mark.parametrize("task", ["copy", "reverse", "addition"])
def test_algorithmic(task) -> None:
    make = lambda seed: AlgorithmicDataModule(task=task, num_train=10, seed=seed)  # noqa: E731
    # n = 1 of 10 symbols has 10 instances, all in the test set: there validation must repeat them
    roomy = lambda dm: 1 if task == "addition" else 2  # noqa: E731 - the shortest length with room for both
    tokens = lambda name: lambda dm: [tuple(i.tokens) for i in getattr(dm, name) if i.length >= roomy(dm)]  # noqa: E731
    assert_fixed_and_disjoint(split_per_seed(make, tokens("val_set"), tokens("test_set")))


@pytest.mark.parametrize("corpus", ["default", "tinyshakespeare"])
def test_text_held_out_halves(corpus, shared_data) -> None:
    data_dir = str(shared_data("tinyshakespeare")) if corpus == "tinyshakespeare" else None
    make = lambda seed: TextDataModule(corpus=corpus, data_dir=data_dir, test_split="held_out", seed=seed)  # noqa: E731
    # contiguous text: validation and test are the two halves of one span, so disjoint by position; the test
    # half's checksum is the same for every seed
    per_seed = split_per_seed(make, lambda dm: dm.split_checksums["val"], lambda dm: dm.split_checksums["test"])
    assert len({test for _, test in per_seed.values()}) == 1 and all(v != t for v, t in per_seed.values())
    dm = make(0)
    val, test = dm._source.corpus.held_out()
    assert val + test == dm._source.corpus.val
