"""Inputs of `cli.py predict`: files read with clear errors, inputs checked against the vocabulary before any
model runs, saved tokenizers that rebuild the same vocabulary, and each DataModule's predict batches."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from datamodules import ImageDataModule, TextDataModule, TranslationDataModule
from datamodules.predict_inputs import read_lines, text_prompts
from datamodules.tokenization import MASK_ID, BPETokenizer, CharTokenizer, WordTokenizer, encode_marked, load_tokenizer

TEXT = "The quick brown fox jumps over the lazy dog.\nPack my box with five dozen liquor jugs!\n" * 20


@pytest.mark.parametrize("tokenizer", [CharTokenizer.fit([TEXT]), WordTokenizer.fit([TEXT]),
                                       BPETokenizer.fit(TEXT.splitlines(keepends=True), 300)], ids=type)  # fmt: skip
def test_a_saved_tokenizer_rebuilds_the_same_vocabulary(tokenizer, tmp_path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(tokenizer.to_dict()))
    loaded = load_tokenizer(path, tokenizer.to_dict()["kind"])
    assert type(loaded) is type(tokenizer) and loaded.to_dict() == tokenizer.to_dict()
    assert loaded.encode(TEXT) == tokenizer.encode(TEXT) and loaded.vocab_size == tokenizer.vocab_size


def test_a_saved_tokenizer_of_another_kind_or_form_is_refused(tmp_path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(CharTokenizer.fit([TEXT]).to_dict()))
    with pytest.raises(ValueError, match=r"holds a 'char' tokenizer but the data is configured with tokenizer='bpe'"):
        load_tokenizer(path, "bpe")
    path.write_text("not json")
    with pytest.raises(ValueError, match="is neither a run.s tokenizer.json .* nor a `tokenizers` file"):
        load_tokenizer(path)
    path.write_text(json.dumps({"kind": "char", "tokens": ["a", "b"]}))
    with pytest.raises(ValueError, match="not the specials"):
        load_tokenizer(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_tokenizer(tmp_path / "missing.json")


def test_mask_marks_a_blank_whatever_the_tokenizer() -> None:
    char = CharTokenizer.fit([TEXT])
    assert encode_marked(char, "fo<mask>x") == [*char.encode("fo"), MASK_ID, *char.encode("x")]
    assert char.unknown("fox€ and ¶") == ["€", "¶"]
    bpe = BPETokenizer.fit(TEXT.splitlines(keepends=True), 300)
    assert encode_marked(bpe, "the <mask> dog").count(MASK_ID) == 1 and bpe.unknown("€") == []


def test_predict_file_errors_name_the_file_and_the_fix(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="predict_file .*missing.txt does not exist"):
        read_lines(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("\n  \n")
    with pytest.raises(ValueError, match="empty.txt has no inputs: it is empty or blank"):
        read_lines(tmp_path / "empty.txt")
    (tmp_path / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    with pytest.raises(ValueError, match="is not UTF-8 text"):
        read_lines(tmp_path / "latin1.txt")
    (tmp_path / "ok.txt").write_text("first\r\n\n second \n")
    assert read_lines(tmp_path / "ok.txt") == ["first", " second "]  # blank lines skipped, spaces kept


def test_text_predict_inputs_are_checked_against_the_vocabulary(tmp_path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The <mask>alue\nprice: 5 €\n", encoding="utf-8")
    dm = TextDataModule(seq_len=16, predict_file=str(prompts))
    with pytest.raises(ValueError, match=r"predict_file .*prompts.txt, input 2 \('price: 5 €'\): '€' not in the run's"):
        next(iter(dm.predict_dataloader()))
    prompts.write_text("The <mask>alue\n", encoding="utf-8")
    batch = next(iter(dm.predict_dataloader()))
    assert batch["text"] == ["The <mask>alue"] and batch["input_ids"] == [encode_marked(dm.tokenizer, "The <mask>alue")]


def test_a_saved_tokenizer_needs_no_corpus_to_predict(tmp_path) -> None:
    saved = tmp_path / "tokenizer.json"
    saved.write_text(json.dumps(TextDataModule(seq_len=16).tokenizer.to_dict()))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Hello\n")
    dm = TextDataModule(seq_len=16, predict_file=str(prompts), tokenizer_file=str(saved))
    assert next(iter(dm.predict_dataloader()))["text"] == ["Hello"]
    assert "_corpus" not in vars(dm)  # the corpus was never read


def test_default_text_prompts_start_validation_lines() -> None:
    dm = TextDataModule(seq_len=16)
    prompts = next(iter(dm.predict_dataloader()))["text"]
    lines = [line.strip() for line in dm._source.corpus.val.splitlines()]
    assert len(prompts) == 4 and all(any(line.startswith(p) for line in lines) for p in prompts)
    assert all(0 < len(p) <= 40 for p in prompts)
    assert text_prompts("one line only") == ["one line only"]


def test_translation_predict_batches_pad_sources_and_keep_references(tmp_path) -> None:
    dm = TranslationDataModule(batch_size=8, max_len=3)
    default = next(iter(dm.predict_dataloader()))
    assert default["src_ids"].shape[0] == 4 and default["src_ids"].shape[1] <= 3  # truncated as in training
    assert default["tgt_text"] == [t for _, t in dm._pairs.val[:4]] and default["index"] == [0, 1, 2, 3]
    sources = tmp_path / "sources.txt"
    sources.write_text("jump\nwalk left twice\n")
    batch = next(iter(TranslationDataModule(batch_size=8, predict_file=str(sources)).predict_dataloader()))
    assert batch["src_text"] == ["jump", "walk left twice"] and batch["tgt_text"] == ["", ""]
    assert batch["src_mask"].tolist() == [[1, 0, 0], [1, 1, 1]]


def test_image_predict_reads_a_folder_as_the_dataset_does(tmp_path) -> None:
    rgb = np.zeros((20, 20, 3), dtype=np.uint8)
    rgb[..., 0] = 255  # pure red: grey 76 after conversion
    Image.fromarray(rgb).save(tmp_path / "red.png")
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(tmp_path / "black.jpg")
    (tmp_path / "README").write_text("not an image")
    dm = ImageDataModule(predict_file=str(tmp_path))
    batch = next(iter(dm.predict_dataloader()))
    assert batch["input"] == [str(tmp_path / "black.jpg"), str(tmp_path / "red.png")]
    assert batch["images"].shape == (2, 1, 8, 8) and batch["labels"].tolist() == [-1, -1]
    mean, std = dm.spec.mean[0], dm.spec.std[0]
    assert torch.allclose(batch["images"][0], torch.full((1, 8, 8), (0 - mean) / std))
    assert torch.allclose(batch["images"][1], torch.full((1, 8, 8), (76 / 255 - mean) / std), atol=1e-2)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="is a folder with no image"):
        ImageDataModule(predict_file=str(empty)).predict_dataloader()
