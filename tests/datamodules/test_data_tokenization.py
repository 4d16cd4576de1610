from typing import get_args

import pytest

from datamodules import algorithmic
from datamodules.text import TextTokenizerName
from datamodules.tokenization import (
    SPECIAL_TOKENS,
    SPECIALS,
    TOKENIZERS,
    BPETokenizer,
    CharTokenizer,
    TokenizerName,
    VocabularyName,
    WordTokenizer,
    build_tokenizer,
)
from datamodules.translation import TranslationTokenizerName

TEXT = "The quick brown fox jumps over the lazy dog.\nPack my box with five dozen liquor jugs!\n" * 20


def test_registry_matches_literals() -> None:
    assert set(TOKENIZERS) == set(get_args(TokenizerName))
    assert set(get_args(TextTokenizerName)) <= set(TOKENIZERS)
    assert set(get_args(TranslationTokenizerName)) <= set(TOKENIZERS)


def test_special_token_table_keeps_every_vocabularys_ids() -> None:
    """Golden ids: committed runs were trained with them, in two layouts (see SPECIALS)."""
    assert set(SPECIALS) == set(get_args(VocabularyName))
    assert SPECIALS["fitted"] == SPECIAL_TOKENS == ("<pad>", "<mask>", "<bos>", "<eos>", "<unk>")
    assert SPECIALS["algorithmic"] == ("<pad>", "<bos>", "<sep>", "<eos>", "+")
    a = algorithmic
    assert (a.PAD, a.BOS, a.SEP, a.EOS, a.PLUS, a.NUM_SPECIALS) == (0, 1, 2, 3, 4, 5)
    dm = algorithmic.AlgorithmicDataModule(num_symbols=7)
    assert (dm.pad_token_id, dm.bos_token_id, dm.eos_token_id, dm.vocab_size) == (0, 1, 3, 12)


@pytest.mark.parametrize("name", get_args(TokenizerName))
def test_specials_and_round_trip(name: TokenizerName) -> None:
    tok = build_tokenizer(name, TEXT.splitlines(keepends=True), 300)
    assert (tok.pad_id, tok.mask_id, tok.bos_id, tok.eos_id) == (0, 1, 2, 3)
    assert tok.special_ids == list(range(len(SPECIAL_TOKENS)))
    names = [tok.hf.id_to_token(i) for i in tok.special_ids] if name == "bpe" else tok.itos[: len(SPECIAL_TOKENS)]
    assert tuple(names) == SPECIAL_TOKENS  # each special's id is its index in the table
    ids = tok.encode(TEXT)
    assert ids and not set(ids) & set(tok.special_ids)  # ordinary text never yields a special id
    assert max(ids) < tok.vocab_size
    expected = " ".join(TEXT.split()) if name == "word" else TEXT
    assert tok.decode(ids) == expected
    assert tok.decode([tok.bos_id, *ids, tok.eos_id, tok.pad_id]) == expected  # specials skipped
    assert tok.encode_batch(["fox", "dog"]) == [tok.encode("fox"), tok.encode("dog")]


def test_char_vocabulary_and_unknown() -> None:
    tok = CharTokenizer.fit(["cab"])
    assert tok.itos == [*SPECIAL_TOKENS, "a", "b", "c"] and tok.vocab_size == 8
    assert tok.encode("abz") == [5, 6, 4]  # z is unknown → <unk> = 4


def test_word_tokenizer_splits_on_whitespace() -> None:
    tok = WordTokenizer.fit(["jump twice", "I_JUMP I_JUMP"])
    assert tok.decode(tok.encode("jump  twice")) == "jump twice"


def test_bpe_is_deterministic_and_byte_level() -> None:
    a, b = (BPETokenizer.fit(TEXT.splitlines(keepends=True), 300) for _ in range(2))
    assert a.vocab_size == 300 and a.hf.to_str() == b.hf.to_str()
    assert a.decode(a.encode("ünïcode ✓ never seen")) == "ünïcode ✓ never seen"
    with pytest.raises(ValueError, match="vocab_size"):
        BPETokenizer.fit([TEXT], 100)
