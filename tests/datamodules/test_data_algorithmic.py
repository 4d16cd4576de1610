from typing import get_args

import pytest
import torch

from datamodules.algorithmic import BOS, EOS, SEP, TASKS, AlgorithmicDataModule, AlgorithmicTaskName
from models.config import IGNORE_INDEX


def small(task: AlgorithmicTaskName, **kwargs) -> AlgorithmicDataModule:
    return AlgorithmicDataModule(task, num_train=64, num_val_per_length=3, test_max_len=12, batch_size=16, **kwargs)


def test_registry_matches_literal() -> None:
    assert set(TASKS) == set(get_args(AlgorithmicTaskName))


@pytest.mark.parametrize("task", get_args(AlgorithmicTaskName))
def test_labels_only_on_answer_tokens(task: AlgorithmicTaskName) -> None:
    dm = small(task)
    batch = next(iter(dm.train_dataloader()))
    ids, labels, lengths = batch["input_ids"], batch["labels"], batch["lengths"]
    assert ids.shape == labels.shape and lengths.shape == (16,)
    assert torch.all((lengths >= 1) & (lengths <= 10))
    for row_ids, row_labels in zip(ids, labels):
        sep = (row_ids == SEP).nonzero().item()
        answer = row_labels != IGNORE_INDEX
        assert row_ids[0] == BOS
        assert answer.nonzero().flatten().tolist() == list(range(sep, sep + int(answer.sum())))  # from <sep> on
        assert row_labels[answer][-1] == EOS
        # the label at position t is the token at t + 1
        targets = row_labels[answer][:-1]
        assert torch.equal(targets, row_ids[sep + 1 : sep + 1 + len(targets)])
        assert row_labels[answer].max() < dm.vocab_size


def _digits(tokens: list[int]) -> str:
    return "".join("+" if t == 4 else str(t - 5) for t in tokens)  # 4 is "+", symbols start at 5


@pytest.mark.parametrize(
    ("task", "answer"),
    [
        ("copy", lambda x: x),
        ("reverse", lambda x: x[::-1]),
        ("addition", lambda x: str(sum(map(int, x.split("+")))).zfill(len(x) // 2 + 1)),
    ],
)
def test_answers_are_correct(task: AlgorithmicTaskName, answer) -> None:
    for inst in small(task).val_set:
        sep = inst.tokens.index(SEP)
        assert _digits(inst.tokens[sep + 1 : -1]) == answer(_digits(inst.tokens[1:sep]))
        assert inst.tokens[-1] == EOS and inst.answer_start == sep + 1


def test_val_covers_every_length_and_max_len() -> None:
    dm = small("addition")
    lengths = torch.cat([b["lengths"] for b in dm.val_dataloader()])
    assert sorted(set(lengths.tolist())) == list(range(1, 13)) and len(lengths) == 36
    assert dm.max_len == max(len(i.tokens) for i in dm.val_set) == 3 * 12 + 5
    longest = max(b["input_ids"].shape[1] for b in dm.test_dataloader())
    assert longest == dm.max_len - 1  # inputs drop the final <eos>


def test_seeded_and_streams_distinct() -> None:
    a, b, c = small("copy"), small("copy"), small("copy", seed=1)
    assert a.data_checksum == b.data_checksum != c.data_checksum
    assert [i.tokens for i in a.val_set] != [i.tokens for i in a.test_set]
