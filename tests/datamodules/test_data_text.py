from pathlib import Path
from typing import get_args

import pytest
import torch

from datamodules.text import CORPORA, TINYSHAKESPEARE_SHA256, CorpusName, TextDataModule


def batches(loader, n: int = 2) -> list[dict[str, torch.Tensor]]:
    it = iter(loader)
    return [next(it) for _ in range(n)]


def test_corpus_registry_matches_literal() -> None:
    assert set(CORPORA) | {"files"} == set(get_args(CorpusName))


def test_properties_available_right_after_init() -> None:
    dm = TextDataModule(seq_len=16)
    assert dm.vocab_size == dm.tokenizer.vocab_size > 50
    assert (dm.pad_token_id, dm.mask_token_id, dm.bos_token_id, dm.eos_token_id) == (0, 1, 2, 3)
    assert {dm.pad_token_id, dm.mask_token_id} <= set(dm.special_token_ids)
    assert len(dm.data_checksum) == 64
    assert dm.eval_lengths == [16, 32, 64, 128]


@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_training_windows_are_next_token_pairs(tokenizer: str) -> None:
    dm = TextDataModule(tokenizer=tokenizer, bpe_vocab_size=512, seq_len=32, batch_size=4, train_batches_per_epoch=3)
    (b,) = batches(dm.train_dataloader(), 1)
    assert b["input_ids"].shape == b["labels"].shape == (4, 32) and b["input_ids"].dtype == torch.long
    assert torch.equal(b["input_ids"][:, 1:], b["labels"][:, :-1])
    assert not torch.isin(b["input_ids"], torch.tensor(dm.special_token_ids)).any()  # MLM can mask freely
    assert len(dm.train_dataloader()) == 3


def test_training_windows_are_a_pure_function_of_seed_and_index() -> None:
    a, b, c = (TextDataModule(seq_len=32, batch_size=4, seed=s) for s in (0, 0, 1))
    da, db, dc = (dm.train_dataloader().dataset for dm in (a, b, c))
    for i in (0, 7, 123_456):  # any index, also beyond one epoch
        assert torch.equal(da[i]["input_ids"], db[i]["input_ids"])
    assert not torch.equal(da[7]["input_ids"], dc[7]["input_ids"])
    assert not torch.equal(da[7]["input_ids"], da[8]["input_ids"])


def test_epochs_draw_fresh_windows_and_replay_after_restart() -> None:
    dm = TextDataModule(seq_len=16, batch_size=2, train_batches_per_epoch=2)
    loader = dm.train_dataloader()
    epoch0 = batches(loader)
    loader.batch_sampler.sampler.set_epoch(1)  # what Lightning does at the start of epoch 1
    epoch1 = batches(loader)
    assert not torch.equal(epoch0[0]["input_ids"], epoch1[0]["input_ids"])
    restarted = TextDataModule(seq_len=16, batch_size=2, train_batches_per_epoch=2).train_dataloader()
    restarted.batch_sampler.sampler.set_epoch(1)  # what Lightning does when resuming in epoch 1
    assert all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(epoch1, batches(restarted)))


def test_val_windows_tile_the_same_tokens_at_every_length() -> None:
    dm = TextDataModule(seq_len=16, val_tokens=1000, batch_size=8)
    loaders = dm.val_dataloader()
    assert len(loaders) == 4 and dm.test_dataloader()[0].dataset.length == 16
    n = len(dm.val_ids) - 1
    assert n == 1000 // 128 * 128  # capped to a multiple of every length
    for length, loader in zip(dm.eval_lengths, loaders):
        inputs = torch.cat([b["input_ids"] for b in loader])
        labels = torch.cat([b["labels"] for b in loader])
        assert inputs.shape == (n // length, length)
        # concatenated windows are exactly the stream: non-overlapping, nothing skipped
        assert torch.equal(inputs.flatten(), dm.val_ids[:-1]) and torch.equal(labels.flatten(), dm.val_ids[1:])


def test_val_tokens_capped_to_split() -> None:
    dm = TextDataModule(seq_len=16, eval_lengths=[16], val_tokens=10**9)
    assert len(dm.val_ids) - 1 == (len(dm._data.val_ids) - 1) // 16 * 16
    with pytest.raises(ValueError, match="too few"):
        _ = TextDataModule(seq_len=16, eval_lengths=[10**7]).val_ids


def test_tinyshakespeare_from_data_dir_verifies_checksum(shared_data) -> None:
    dm = TextDataModule(corpus="tinyshakespeare", data_dir=str(shared_data("tinyshakespeare")), seq_len=16)
    assert dm.data_checksum == TINYSHAKESPEARE_SHA256
    assert dm.tokenizer.decode(dm.train_dataloader().dataset.ids[:14].tolist()) == "First Citizen:"
    assert len(dm._data.train_ids) + len(dm._data.val_ids) == 1115394  # characters, all ASCII


def test_tinyshakespeare_corrupt_copy_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "input.txt").write_text("Not Shakespeare.\n")
    with pytest.raises(ValueError, match=TINYSHAKESPEARE_SHA256):
        _ = TextDataModule(corpus="tinyshakespeare", data_dir=str(tmp_path)).vocab_size


def test_missing_data_dir_names_path_and_url(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="raw.githubusercontent.com/karpathy/char-rnn") as e:
        _ = TextDataModule(corpus="tinyshakespeare", data_dir=str(tmp_path)).vocab_size
    assert str(tmp_path / "input.txt") in str(e.value)


def test_held_out_test_split_leaves_training_text_alone() -> None:
    """`test_split: held_out` cuts the validation text into two contiguous halves at a line boundary: the
    model never selects on the second; `val` (the default) evaluates the validation split, as runs did."""
    old = TextDataModule(seq_len=16, eval_lengths=[16], val_tokens=10**9)
    held = TextDataModule(seq_len=16, eval_lengths=[16], val_tokens=10**9, test_split="held_out")
    assert torch.equal(old._data.train_ids, held._data.train_ids)  # training is the same either way
    assert torch.equal(old.test_ids, old.val_ids)  # what `cli.py test` evaluated before held-out splits
    val, test = held._source.corpus.held_out()
    assert val + test == old._source.corpus.val and val.endswith("\n") and abs(len(val) - len(test)) < len(val) // 10
    assert len(held.val_ids) + len(held.test_ids) <= len(old.val_ids) + 2  # halves of the same tokens
    assert not torch.equal(held.test_ids[:100], held.val_ids[:100])
    assert held.split_checksums.keys() == {"train", "val", "test"} and old.split_checksums.keys() == {"train", "val"}
    assert held.split_checksums["train"] == old.split_checksums["train"] and held.data_checksum == old.data_checksum
    loader = held.test_dataloader()[0]
    first = next(iter(loader))
    assert torch.equal(first["input_ids"][0], held.test_ids[:16])


def test_unknown_test_split_names_the_choices() -> None:
    with pytest.raises(ValueError, match="held_out"):
        TextDataModule(test_split="test")
