"""`corpus: files`: the user's own text in every format, tokenized once into a token store, read window by window,
in an order that only (seed, step) decides; and each kind of bad input as a one-line error before training."""

import json
import os
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import datamodules.token_store as token_store
from contract.errors import ConfigError
from datamodules.text import RandomWindows, TextDataModule
from datamodules.token_store import TokenArray
from datamodules.tokenization import load_tokenizer

WORDS = "the of and to a in that is was he for it with as his on be at by had not are but from or have".split()


def generated_lines(n: int, seed: int = 0) -> list[str]:
    """``n`` lines of pseudo-English, reproducibly."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + "\n" for _ in range(n)]


@pytest.fixture
def corpus(tmp_path: Path) -> dict[str, Path]:
    """Three training text files and one validation file."""
    for i in range(3):
        (tmp_path / f"train{i}.txt").write_text("".join(generated_lines(400, seed=i)))
    (tmp_path / "val.txt").write_text("".join(generated_lines(200, seed=9)))
    return {"dir": tmp_path, "train": tmp_path / "train*.txt", "val": tmp_path / "val.txt"}


def files_dm(corpus: dict[str, Path], **kwargs) -> TextDataModule:
    settings = dict(corpus="files", train_files=str(corpus["train"]), val_files=str(corpus["val"]), seq_len=16,
                    batch_size=4, cache_dir=str(corpus["dir"] / "cache"), train_batches_per_epoch=5)  # fmt: skip
    return TextDataModule(**(settings | kwargs))


def test_the_store_holds_exactly_the_files_tokens(corpus) -> None:
    dm = files_dm(corpus)
    text = "".join(p.read_text() for p in sorted(corpus["dir"].glob("train*.txt")))
    assert torch.equal(dm._data.train_ids[:], torch.tensor(dm.tokenizer.encode(text)))
    assert dm.tokenizer.decode(dm._data.val_ids[:].tolist()) == corpus["val"].read_text()
    manifest = dm.prepared_store.manifest
    assert manifest["dtype"] == "uint16" and manifest["tokens"] == {"train": len(text), "val": len(dm._data.val_ids)}
    assert [s["path"] for s in manifest["sources"]["train"]] == sorted(str(p) for p in corpus["dir"].glob("train*"))
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (4, 16) and torch.equal(batch["input_ids"][:, 1:], batch["labels"][:, :-1])


def test_every_format_gives_the_same_tokens(corpus, tmp_path) -> None:
    """Plain text, JSON Lines, Parquet and a saved `datasets` folder of the same documents tokenize the same."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Dataset

    docs = [line.rstrip("\n") for line in generated_lines(300, seed=5)]
    (tmp_path / "docs.txt").write_text("".join(d + "\n" for d in docs))
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(docs)))
    pq.write_table(pa.table({"text": docs}), tmp_path / "docs.parquet")
    Dataset.from_dict({"text": docs}).save_to_disk(str(tmp_path / "saved"))
    tokenizer = str(tmp_path / "tok.json")
    reference = files_dm(corpus)
    Path(tokenizer).write_text(json.dumps(reference.tokenizer.to_dict()))
    streams = {}
    for name in ("docs.txt", "docs.jsonl", "docs.parquet", "saved"):
        dm = files_dm(corpus, train_files=str(tmp_path / name), tokenizer_file=tokenizer)
        streams[name] = dm._data.train_ids[:]
    first = streams.pop("docs.txt")
    assert len(first) > 1000 and all(torch.equal(first, ids) for ids in streams.values())


def test_the_store_is_reused_and_remade_when_a_file_changes(corpus, monkeypatch) -> None:
    first = files_dm(corpus)
    assert first.prepared_store.built
    calls = []
    monkeypatch.setattr(token_store, "build", lambda *a, **k: calls.append(a) or pytest.fail("tokenized again"))
    again = files_dm(corpus, seed=3, seq_len=8)  # other run settings: the same store
    assert not again.prepared_store.built and again.prepared_store.directory == first.prepared_store.directory
    assert torch.equal(again._data.val_ids[:], first._data.val_ids[:])
    monkeypatch.undo()
    with (corpus["dir"] / "train1.txt").open("a") as f:
        f.write("a changed file\n")
    changed = files_dm(corpus)
    assert changed.prepared_store.built and changed.prepared_store.directory != first.prepared_store.directory
    bpe = files_dm(corpus, tokenizer="bpe", bpe_vocab_size=300)  # another tokenizer: another store
    earlier = (first.prepared_store.directory, changed.prepared_store.directory)
    assert bpe.prepared_store.built and bpe.prepared_store.directory not in earlier


def test_a_named_store_is_remade_for_new_files_and_refuses_another_tokenizer(corpus, tmp_path) -> None:
    store = str(tmp_path / "store")
    first = files_dm(corpus, token_store=store)
    assert first.prepared_store.built and first.prepared_store.directory == Path(store)
    (corpus["dir"] / "val.txt").write_text("".join(generated_lines(100, seed=11)))
    remade = files_dm(corpus, token_store=store)
    assert remade.prepared_store.built and len(remade._data.val_ids) < len(first._data.val_ids)
    other = files_dm(corpus, tokenizer="bpe", bpe_vocab_size=300, token_store=str(tmp_path / "bpe_store"))
    saved = tmp_path / "bpe.json"
    saved.write_text(json.dumps(other.tokenizer.to_dict()))
    with pytest.raises(ValueError, match=rf"token store {store} was made by another tokenizer than .*bpe.json"):
        _ = files_dm(corpus, tokenizer="bpe", tokenizer_file=str(saved), token_store=store).tokenizer


def test_without_validation_files_the_last_tenth_is_held_out(corpus) -> None:
    dm = files_dm(corpus, val_files=None, test_split="held_out")
    train, val, test = dm._data.train_ids, dm._data.val_ids, dm._data.test_ids
    total = sum(p.stat().st_size for p in corpus["dir"].glob("train*.txt"))  # one byte per character here
    assert len(train) + len(val) + len(test) == total and len(train) == int(0.9 * total)
    assert abs(len(val) - len(test)) <= 1
    assert dm.tokenizer.decode(val[-20:].tolist()) + dm.tokenizer.decode(test[:20].tolist()) in (
        "".join(p.read_text() for p in sorted(corpus["dir"].glob("train*.txt")))
    )
    assert "val" not in dm.prepared_store.manifest["tokens"] and set(dm.split_checksums) == {"train", "val", "test"}


def test_a_bpe_fitted_on_a_bounded_sample(corpus) -> None:
    dm = files_dm(corpus, tokenizer="bpe", bpe_vocab_size=300, tokenizer_sample_bytes=2000)
    sample = list(token_store.sample_for_tokenizer(dm._source.sources["train"], 2000, held_out=False))
    assert 1000 < sum(map(len, sample)) < 4000  # spread over the files: every k-th record
    assert dm.vocab_size <= 300 and dm.tokenizer.decode(dm._data.val_ids[:50].tolist()) in corpus["val"].read_text()


def test_any_tokenizers_file_is_accepted(corpus, tmp_path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    hf.train_from_iterator(generated_lines(500), trainer)
    hf.save(str(tmp_path / "tokenizer.json"))
    dm = files_dm(corpus, tokenizer="bpe", tokenizer_file=str(tmp_path / "tokenizer.json"))
    assert dm.vocab_size == hf.get_vocab_size() and dm.eos_token_id == hf.token_to_id("<|endoftext|>")
    assert dm.mask_token_id is None  # no mask token in it: a masked LM refuses it (tests/lit_modules)
    assert dm._data.train_ids[:20].tolist() == hf.encode(corpus["dir"].joinpath("train0.txt").read_text()).ids[:20]
    assert load_tokenizer(tmp_path / "tokenizer.json").to_dict()["kind"] == "pretrained"


def global_batches(dm: TextDataModule, steps: int, world: int = 1, workers: int = 0, start: int = 0) -> list:
    """The inputs of each global step from ``start``: every rank's slice, put together."""
    per_rank = []
    for rank in range(world):
        dm.batch_size, dm.num_workers = 8 // world, workers
        dm.trainer = SimpleNamespace(global_step=start, accumulate_grad_batches=1, current_epoch=0,
                                     global_rank=rank, world_size=world)  # fmt: skip
        loader = dm.train_dataloader()
        per_rank.append([b["input_ids"] for b, _ in zip(loader, range(steps))])
    return [torch.cat([rank[step] for rank in per_rank]) for step in range(steps)]


def test_the_batch_at_every_step_is_the_same_on_any_processes_workers_or_resume(corpus) -> None:
    dm = files_dm(corpus, train_batches_per_epoch=100)
    reference = global_batches(dm, 6)
    for world, workers in ((2, 0), (1, 2), (2, 2)):
        got = global_batches(dm, 6, world, workers)
        assert all(torch.equal(a, b) for a, b in zip(reference, got)), (world, workers)
    resumed = global_batches(dm, 3, world=2, workers=2, start=3)  # restored from a checkpoint at step 3
    assert all(torch.equal(a, b) for a, b in zip(reference[3:], resumed))


def test_windows_are_read_without_loading_the_corpus(tmp_path) -> None:
    """Resident memory stays flat while random windows are drawn from a 400 MB token file (sparse, so the test
    writes nothing): a tensor of it would take 1.6 GB. The benchmark measures it on real training."""
    psutil = pytest.importorskip("psutil")
    path = tmp_path / "train.bin"
    tokens = 200_000_000
    with path.open("wb") as f:
        f.truncate(tokens * 2)
    windows = RandomWindows(TokenArray(str(path), "uint16", 0, tokens), seq_len=256, seed=0, num_samples=10**9)
    process = psutil.Process(os.getpid())
    for i in range(200):
        windows[i]
    before = process.memory_info().rss
    for i in range(200, 5200):
        assert windows[i]["input_ids"].shape == (256,)
    assert process.memory_info().rss - before < 20 * 2**20


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"train_files": "{dir}/missing.txt"}, r"data.train_files: .*missing.txt does not exist"),
        ({"train_files": "{dir}/*.none"}, r"the glob '.*\*.none' matches no file"),
        ({"train_files": "{dir}/empty.txt"}, r"empty.txt is empty; remove it"),
        ({"train_files": "{dir}/bad.jsonl"}, r"bad.jsonl:2 has no string 'text' field"),
        ({"train_files": "{dir}/short.txt", "seq_len": 64}, r"short.txt\) hold \d+ training tokens, fewer than one"),
        ({"train_files": "{dir}/folder"}, r"folder is a folder but not a dataset saved by `datasets`"),
    ],
)
def test_bad_files_are_one_line_errors_naming_the_file(corpus, kwargs, message) -> None:
    root = corpus["dir"]
    (root / "empty.txt").write_text("")
    (root / "bad.jsonl").write_text('{"text": "fine"}\n{"body": "no text field"}\n')
    (root / "short.txt").write_text("too short\n")
    (root / "folder").mkdir()
    kwargs = {k: v.format(dir=root) if isinstance(v, str) else v for k, v in kwargs.items()}
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        files_dm(corpus, **kwargs).prepare_data()


def test_files_and_the_corpus_flag_must_agree(corpus) -> None:
    with pytest.raises(ConfigError, match="data.corpus=files needs data.train_files"):
        TextDataModule(corpus="files")
    with pytest.raises(ConfigError, match="set data.corpus=files to use them"):
        TextDataModule(train_files=str(corpus["train"]))


def test_the_token_file_reads_any_window(tmp_path) -> None:
    ids = (np.arange(1000, dtype=np.uint64) * 70_000).astype(np.uint32)  # ids above 65,535: uint32
    ids.tofile(tmp_path / "t.bin")
    array = TokenArray(str(tmp_path / "t.bin"), "uint32", 0, 1000)
    assert array[10:20].tolist() == ids[10:20].tolist() and array[995:2000].tolist() == ids[995:].tolist()
    part = array.part(100, 200)
    assert len(part) == 100 and part[-5:].tolist() == ids[195:200].tolist() and part[:].dtype == torch.long


def test_a_cache_dir_under_home_is_expanded(corpus, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    dm = files_dm(corpus, cache_dir="~/cache")
    assert dm.prepared_store.directory.parent == tmp_path / "home" / "cache" / "token_stores"


def test_a_built_store_is_read_without_taking_its_lock(corpus, tmp_path, monkeypatch) -> None:
    """A store on a read-only filesystem (a shared, prepared corpus) can be read: no lock file is made to read it."""
    store = tmp_path / "shared" / "store"
    built = files_dm(corpus, token_store=str(store))
    assert built.prepared_store.built
    monkeypatch.setattr(token_store.fcntl, "flock", lambda *a: pytest.fail("locked to read a built store"))
    again = files_dm(corpus, token_store=str(store))
    assert not again.prepared_store.built and torch.equal(again._data.val_ids[:], built._data.val_ids[:])


def test_a_split_too_short_for_its_eval_lengths_says_how_to_fix_it(corpus, tmp_path) -> None:
    (tmp_path / "short.txt").write_text("a few words\n")
    dm = files_dm(corpus, val_files=str(tmp_path / "short.txt"), eval_lengths=[64])
    with pytest.raises(ValueError) as err:
        dm.val_ids
    assert str(err.value) == (
        "validation split has 12 tokens: too few for one window of every eval length [64] (least common multiple "
        "64); give more text (or the split's own files, data.val_files), or shorter data.eval_lengths"
    )
