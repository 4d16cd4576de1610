"""`dataset: files` for translation: the user's own aligned source and target files (here the first Multi30k
pairs, read from ../shared/data), a joint BPE, held-out splits where files are not given, and one-line errors."""

import gzip

import pytest
import torch

from datamodules.translation import TranslationDataModule


@pytest.fixture
def parallel(shared_data, tmp_path):
    """train / val files (.de, .en) cut from Multi30k: 3,000 and 200 pairs; the training pair gzip-compressed."""
    root = shared_data("multi30k")
    for split, name, count in (("train", "train", 3000), ("val", "val", 200)):
        for lang in ("de", "en"):
            with gzip.open(root / f"{name}.{lang}.gz", "rt", encoding="utf-8") as f:
                lines = [next(f) for _ in range(count)]
            path = tmp_path / (f"{split}.{lang}" + (".gz" if split == "train" else ""))
            opener = gzip.open if split == "train" else open
            with opener(path, "wt", encoding="utf-8") as out:
                out.writelines(lines)
    return tmp_path


def files(root, split: str) -> list[str]:
    suffix = ".gz" if split == "train" else ""
    return [str(root / f"{split}.de{suffix}"), str(root / f"{split}.en{suffix}")]


def test_own_parallel_files_train_with_a_joint_bpe(parallel) -> None:
    dm = TranslationDataModule(dataset="files", train_files=files(parallel, "train"), val_files=files(parallel, "val"),
                               bpe_vocab_size=600, batch_size=8)  # fmt: skip
    assert dm.tokenizer_name == "bpe" and dm.vocab_size == 600
    pairs = dm._pairs
    assert len(pairs.val) == 200 and len(pairs.train) + len(pairs.test) == 3000 and len(pairs.test) == 300
    assert not set(pairs.test) & set(pairs.train)  # no test file: a seeded tenth held out of training
    assert pairs.val[0] == tuple((parallel / f"val.{lang}").read_text().split("\n")[0] for lang in ("de", "en"))
    batch = next(iter(dm.train_dataloader()))
    assert batch["src_ids"].shape[0] == 8 and batch["tgt_in"][0, 0] == dm.bos_token_id
    assert dm.tokenizer.decode(dm.tokenizer.encode(pairs.train[0][0])) == pairs.train[0][0]  # German, same vocabulary
    again = TranslationDataModule(dataset="files", train_files=files(parallel, "train"),
                                  val_files=files(parallel, "val"), bpe_vocab_size=600, batch_size=8)  # fmt: skip
    assert again.data_checksum == dm.data_checksum and again._pairs.test == pairs.test
    assert torch.equal(next(iter(again.train_dataloader()))["src_ids"], batch["src_ids"])


def test_without_validation_files_both_held_out_splits_are_disjoint(parallel) -> None:
    dm = TranslationDataModule(dataset="files", train_files=files(parallel, "train"), bpe_vocab_size=600)
    train, val, test = (set(getattr(dm._pairs, s)) for s in ("train", "val", "test"))
    assert len(test) == 300 and 260 <= len(val) <= 270 and not (train & val or train & test or val & test)


def test_bad_parallel_files_are_one_line_errors(parallel) -> None:
    short = parallel / "short.en"
    short.write_text("one line\n")
    with pytest.raises(ValueError, match=r"val.de has 200 lines but .*short.en has 1; line i of one must translate"):
        TranslationDataModule(dataset="files", train_files=files(parallel, "train"),
                              val_files=[files(parallel, "val")[0], str(short)]).prepare_data()  # fmt: skip
    with pytest.raises(FileNotFoundError, match=r"data.train_files: .*missing.de does not exist"):
        TranslationDataModule(dataset="files", train_files=[str(parallel / "missing.de"), str(short)]).prepare_data()
    with pytest.raises(ValueError, match=r"needs two paths, \[source, target\]"):
        TranslationDataModule(dataset="files", train_files=[str(short)]).prepare_data()
    with pytest.raises(ValueError, match="data.dataset=files needs data.train_files"):
        TranslationDataModule(dataset="files")
    with pytest.raises(ValueError, match="set data.dataset=files to use them"):
        TranslationDataModule(train_files=files(parallel, "train"))
