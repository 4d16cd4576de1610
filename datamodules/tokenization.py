"""Tokenizers behind one small protocol, fitted on training text only, and the suite's table of special tokens.

Every fitted tokenizer (char, word, BPE) reserves the same special ids (``<pad>``=0, ``<mask>``=1,
``<bos>``=2, ``<eos>``=3, ``<unk>``=4), so models and losses can rely on them whatever the tokenizer. The
generated algorithmic tasks number their specials differently (``<bos>``=1): both layouts are in :data:`SPECIALS`.
"""

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, get_args

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

VocabularyName = Literal["fitted", "algorithmic"]

# The one table of special tokens: each vocabulary's reserved tokens in id order (a token's id is its
# index), before its other symbols. Two layouts, because committed runs were trained with both and a
# token's id must not move:
# - fitted: every tokenizer fitted on data (char, word, BPE), so text, masked-LM and translation runs
#   share pad / mask / bos / eos / unk ids whatever the tokenizer;
# - algorithmic: the generated copy / reverse / addition tasks, which mask nothing and meet no unknown
#   symbol, but need <sep> between question and answer and addition's "+".
SPECIALS: dict[VocabularyName, tuple[str, ...]] = {
    "fitted": ("<pad>", "<mask>", "<bos>", "<eos>", "<unk>"),
    "algorithmic": ("<pad>", "<bos>", "<sep>", "<eos>", "+"),
}
assert set(SPECIALS) == set(get_args(VocabularyName))

SPECIAL_TOKENS = SPECIALS["fitted"]
PAD_ID, MASK_ID, BOS_ID, EOS_ID, UNK_ID = map(SPECIAL_TOKENS.index, ("<pad>", "<mask>", "<bos>", "<eos>", "<unk>"))


class Tokenizer(Protocol):
    """What DataModules and models need from a tokenizer."""

    @property
    def vocab_size(self) -> int: ...

    pad_id: int
    mask_id: int
    bos_id: int
    eos_id: int
    special_ids: list[int]
    mask_token: str

    def encode(self, text: str) -> list[int]: ...

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]: ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, special tokens skipped."""
        ...

    def unknown(self, text: str) -> list[str]:
        """The symbols of ``text`` outside the vocabulary (they would encode as ``<unk>``)."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """Everything needed to rebuild the tokenizer (:func:`load_tokenizer`), as JSON-able data."""
        ...


class TokenizerFields:
    """The ids a model needs from a DataModule's tokenizer, as properties the CLI links into the
    model; the class defines `tokenizer`."""

    tokenizer: Tokenizer

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def pad_token_id(self) -> int:
        return self.tokenizer.pad_id

    @property
    def bos_token_id(self) -> int:
        return self.tokenizer.bos_id

    @property
    def eos_token_id(self) -> int:
        return self.tokenizer.eos_id

    @property
    def mask_token_id(self) -> int:
        return self.tokenizer.mask_id

    @property
    def special_token_ids(self) -> list[int]:
        return list(self.tokenizer.special_ids)


class _Specials:
    """The shared special ids, as attributes."""

    pad_id, mask_id, bos_id, eos_id, unk_id = PAD_ID, MASK_ID, BOS_ID, EOS_ID, UNK_ID
    special_ids = list(range(len(SPECIAL_TOKENS)))
    mask_token = SPECIAL_TOKENS[MASK_ID]  # how an input to `cli.py predict` marks a masked position


_S = TypeVar("_S", bound="_SymbolTokenizer")


class _SymbolTokenizer(_Specials):
    """A fixed vocabulary of symbols (characters or words) after the specials; unknown → ``<unk>``.

    Args:
        symbols: the vocabulary, in id order; ids start after the special tokens.
    """

    sep = ""  # what joins symbols back into text
    kind: "TokenizerName"

    def __init__(self, symbols: Iterable[str]) -> None:
        self.itos = list(SPECIAL_TOKENS) + list(symbols)
        self.stoi = {s: i for i, s in enumerate(self.itos)}

    @staticmethod
    def split(text: str) -> list[str]:
        raise NotImplementedError

    @classmethod
    def fit(cls: type[_S], texts: Sequence[str], vocab_size: int = 0) -> _S:
        """Vocabulary = every symbol of ``texts``, sorted (``vocab_size`` is ignored: it is implied)."""
        return cls(sorted({s for t in texts for s in cls.split(t)}))

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        get = self.stoi.get
        return [get(s, UNK_ID) for s in self.split(text)]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids: Sequence[int]) -> str:
        first = len(SPECIAL_TOKENS)
        return self.sep.join(self.itos[i] for i in ids if i >= first)

    def unknown(self, text: str) -> list[str]:
        return list(dict.fromkeys(s for s in self.split(text) if s not in self.stoi))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "tokens": self.itos}

    @classmethod
    def from_dict(cls: type[_S], data: dict[str, Any]) -> _S:
        tokens = data["tokens"]
        if tuple(tokens[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise ValueError(f"its first tokens are {tokens[: len(SPECIAL_TOKENS)]}, not the specials {SPECIAL_TOKENS}")
        return cls(tokens[len(SPECIAL_TOKENS) :])


class CharTokenizer(_SymbolTokenizer):
    """One token per character."""

    sep = ""
    kind = "char"

    @staticmethod
    def split(text: str) -> list[str]:
        return list(text)


class WordTokenizer(_SymbolTokenizer):
    """One token per whitespace-separated word (SCAN: commands and actions are words)."""

    sep = " "
    kind = "word"

    @staticmethod
    def split(text: str) -> list[str]:
        return text.split()


class BPETokenizer(_Specials):
    """Hugging Face byte-level BPE: any text encodes (no ``<unk>`` needed) and decodes exactly.

    Args:
        tokenizer: a trained ``tokenizers.Tokenizer`` whose first ids are :data:`SPECIAL_TOKENS`.
    """

    def __init__(self, tokenizer: HFTokenizer) -> None:
        self.hf = tokenizer

    @classmethod
    def fit(cls, texts: Sequence[str], vocab_size: int = 1024) -> "BPETokenizer":
        """Train on ``texts``; ``vocab_size`` counts the 256 byte tokens and the specials."""
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        if vocab_size < len(alphabet) + len(SPECIAL_TOKENS):
            raise ValueError(f"bpe vocab_size must be >= {len(alphabet) + len(SPECIAL_TOKENS)}, got {vocab_size}")
        hf = HFTokenizer(models.BPE())
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        hf.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SPECIAL_TOKENS),  # first, so they get ids 0..4
            initial_alphabet=alphabet,  # every byte, so unseen characters still encode
            show_progress=False,
        )
        hf.train_from_iterator(texts, trainer)
        return cls(hf)

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.hf.encode_batch(list(texts))]

    def decode(self, ids: Sequence[int]) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=True)

    def unknown(self, text: str) -> list[str]:
        return []  # byte-level: every text encodes

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "bpe", "tokenizer": json.loads(self.hf.to_str())}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BPETokenizer":
        hf = HFTokenizer.from_str(json.dumps(data["tokenizer"]))
        specials = tuple(hf.id_to_token(i) for i in range(len(SPECIAL_TOKENS)))
        if specials != SPECIAL_TOKENS:
            raise ValueError(f"its first tokens are {list(specials)}, not the specials {SPECIAL_TOKENS}")
        return cls(hf)


class PretrainedTokenizer(BPETokenizer):
    """Any Hugging Face ``tokenizers`` file (``tokenizer.json``, e.g. GPT-2's or Llama's) with its own ids.

    Its special tokens keep their ids; each role (pad, bos, eos) is the first of its usual spellings the
    vocabulary has, else the end-of-text token (a causal LM needs none of them); without a mask token ``mask_id``
    is None, which a masked LM refuses.

    Args:
        tokenizer: the loaded ``tokenizers.Tokenizer``.
    """

    ROLES = {
        "eos_id": ("</s>", "<eos>", "<|endoftext|>", "<|end_of_text|>", "[SEP]"),
        "bos_id": ("<s>", "<bos>", "<|begin_of_text|>", "[CLS]", "<|endoftext|>"),
        "pad_id": ("<pad>", "[PAD]", "<|pad|>"),
        "mask_id": ("<mask>", "[MASK]"),
        "unk_id": ("<unk>", "[UNK]"),
    }

    def __init__(self, tokenizer: HFTokenizer) -> None:
        super().__init__(tokenizer)
        found = {role: next((i for t in names if (i := tokenizer.token_to_id(t)) is not None), None)
                 for role, names in self.ROLES.items()}  # fmt: skip
        fallback = found["eos_id"] if found["eos_id"] is not None else 0
        for role, token_id in found.items():
            setattr(self, role, fallback if token_id is None and role != "mask_id" else token_id)
        self.special_ids = sorted({*found.values()} - {None})  # type: ignore[arg-type]
        self.mask_token = SPECIAL_TOKENS[MASK_ID] if self.mask_id is None else tokenizer.id_to_token(self.mask_id)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "pretrained", "tokenizer": json.loads(self.hf.to_str())}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PretrainedTokenizer":
        return cls(HFTokenizer.from_str(json.dumps(data["tokenizer"])))


TokenizerName = Literal["char", "word", "bpe"]
TOKENIZERS: dict[TokenizerName, type[CharTokenizer | WordTokenizer | BPETokenizer]] = {
    "char": CharTokenizer,
    "word": WordTokenizer,
    "bpe": BPETokenizer,
}
assert set(TOKENIZERS) == set(get_args(TokenizerName))


# every kind a saved tokenizer can be: the fitted ones, and a user's own `tokenizers` file
SAVED_KINDS: dict[str, type[CharTokenizer | WordTokenizer | BPETokenizer]] = {
    **TOKENIZERS,
    "pretrained": PretrainedTokenizer,
}


def tokenizer_from_dict(data: dict[str, Any]) -> Tokenizer:
    """A tokenizer from its ``to_dict`` form."""
    return SAVED_KINDS[data["kind"]].from_dict(data)


def build_tokenizer(name: TokenizerName, texts: Sequence[str], vocab_size: int) -> Tokenizer:
    """Fit the tokenizer ``name`` on ``texts`` (``vocab_size`` is used by BPE only)."""
    return TOKENIZERS[name].fit(texts, vocab_size)


def load_tokenizer(path: str | Path, expected: TokenizerName | None = None) -> Tokenizer:
    """The tokenizer saved at ``path`` (a run's ``tokenizer.json``: ``to_dict`` as JSON).

    Args:
        path: the file.
        expected: the kind the DataModule is configured with (``char``, ``word``, ``bpe``); another is an error.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer_file {path} does not exist; a run saves its tokenizer as tokenizer.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "model" in data and "kind" not in data:  # a `tokenizers` file of one's own
            data = {"kind": "pretrained", "tokenizer": data}
        kind = data["kind"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"tokenizer_file {path} is neither a run's tokenizer.json (JSON with a 'kind') nor a `tokenizers` "
            f"file (JSON with a 'model'): {e}"
        ) from e
    if kind not in SAVED_KINDS:
        raise ValueError(f"tokenizer_file {path}: kind {kind!r} is not one of {', '.join(map(repr, SAVED_KINDS))}")
    if kind == "pretrained" and expected not in (None, "bpe"):
        raise ValueError(f"tokenizer_file {path} is a subword `tokenizers` file; set tokenizer: bpe to use it")
    if expected is not None and kind not in (expected, "pretrained"):
        raise ValueError(
            f"tokenizer_file {path} holds a {kind!r} tokenizer but the data is configured with tokenizer={expected!r}; "
            f"set tokenizer: {kind} (the run's) or drop tokenizer_file"
        )
    try:
        return SAVED_KINDS[kind].from_dict(data)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"tokenizer_file {path} is not a valid {kind!r} tokenizer: {e}") from e


def encode_marked(tokenizer: Tokenizer, text: str) -> list[int]:
    """``text`` as ids, each literal ``<mask>`` (``tokenizer.mask_token``) as the mask id: how a masked-LM input
    to ``cli.py predict`` marks its blanks whatever the tokenizer (a character tokenizer would spell it out)."""
    pieces = text.split(tokenizer.mask_token)
    ids = tokenizer.encode(pieces[0]) if pieces[0] else []
    for piece in pieces[1:]:
        ids += [tokenizer.mask_id, *(tokenizer.encode(piece) if piece else [])]
    return ids
