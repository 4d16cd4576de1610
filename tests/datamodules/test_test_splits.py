"""A test split never meets validation: for every DataModule (built-in data and the user's own files), the
held-out test split is the same whatever the run seed, and no validation split drawn with any of several seeds
shares an example with it. Checked by content (a pair, an image index, an instance's tokens) or, for running text,
where repeated lines make content a poor key, by position (the two halves of the validation span).

Not covered offline: WikiText-2 (its official test file, a download) and torchvision's image sets (their official
test sets): both splits come from separate files, fixed whatever the seed. One overlap is by design: the
algorithmic tasks' shortest instances (every one of them is in the test set) recur in validation."""

from __future__ import annotations

import pytest

from datamodules import AlgorithmicDataModule, ImageDataModule, TextDataModule, TranslationDataModule
from tests.datamodules.test_data_image_folder import write_digits
from tests.datamodules.test_data_parallel_files import files, parallel  # noqa: F401 - the fixture
from tests.datamodules.test_data_text_files import corpus, files_dm  # noqa: F401 - the fixture

SEEDS = (0, 1, 2, 7, 10, 11, 12, 12345)  # run seeds, and the search seeds the studies use (10-12)


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


def assert_halves_of_validation(make) -> None:
    """`make(seed, test_split)`: with `held_out`, validation and test are a first and a second part of the span
    `val` validates on, together exactly that span, test the same for every seed: disjoint by position."""
    whole = make(SEEDS[0], "val")._data.val_ids[:].tolist()
    tests = set()
    for seed in SEEDS:
        data = make(seed, "held_out")._data
        val, test = data.val_ids[:].tolist(), data.test_ids[:].tolist()
        assert val and test and val + test == whole, f"seed {seed}: validation and test do not split the span"
        tests.add(tuple(test))
    assert len(tests) == 1, "the test split moved with the seed"


@pytest.mark.parametrize("name", ["default", "tinyshakespeare"])
def test_text_held_out_halves(name, shared_data) -> None:
    data_dir = str(shared_data("tinyshakespeare")) if name == "tinyshakespeare" else None
    assert_halves_of_validation(lambda seed, split: TextDataModule(corpus=name, data_dir=data_dir, test_split=split,
                                                                   seed=seed))  # fmt: skip


def test_text_files_without_a_test_file(corpus) -> None:  # noqa: F811 - the fixture
    assert_halves_of_validation(lambda seed, split: files_dm(corpus, test_split=split, seed=seed))


def test_text_files_with_a_test_file(corpus) -> None:  # noqa: F811 - the fixture
    """`test_files`: the test split is that file's tokens, validation the whole validation file, for every seed."""
    (corpus["dir"] / "test.txt").write_text("he was not at the end of it\n" * 40)  # characters the training text has
    for seed in SEEDS:
        dm = files_dm(corpus, test_split="held_out", test_files=str(corpus["dir"] / "test.txt"), seed=seed)
        assert dm.tokenizer.decode(dm._data.test_ids[:].tolist()) == (corpus["dir"] / "test.txt").read_text()
        assert dm.tokenizer.decode(dm._data.val_ids[:].tolist()) == corpus["val"].read_text()
