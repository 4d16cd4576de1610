"""Inputs of `cli.py predict` shared by the DataModules: a file of one input per line, checked against the
vocabulary before any model runs, and batches that keep variable-length inputs as lists."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from datamodules.tokenization import Tokenizer, encode_marked

DEFAULT_INPUTS = 4  # inputs of the default predict set (`predict_file` unset)
PROMPT_CHARS = 40  # a default text prompt: the start of a validation line, cut back to a word boundary


def read_lines(path: str | Path) -> list[str]:
    """The non-blank lines of a UTF-8 text file, without their line endings (blank lines are skipped)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"predict_file {path} does not exist (one input per line)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"predict_file {path} is not UTF-8 text ({e}); save it as UTF-8, one input per line") from e
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"predict_file {path} has no inputs: it is empty or blank; write one input per line")
    return lines


def text_prompts(text: str, n: int = DEFAULT_INPUTS, chars: int = PROMPT_CHARS) -> list[str]:
    """``n`` prompts from held-out text: the starts of ``n`` lines spread evenly over it (prose-like ones when
    there are enough: they start with a letter and are longer than a prompt), each cut
    to ``chars`` characters and back to its last space (a prompt ends where a word may start)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # prose reads best: lines that start with a letter and fill a prompt, when there are enough of them
    prose = [line for line in lines if line[0].isalpha() and len(line) > chars]
    lines = prose if len(prose) >= n else lines
    if not lines:
        raise ValueError("no non-blank line in the validation text to take default prompts from; set predict_file")
    picked = [lines[i * len(lines) // n] for i in range(min(n, len(lines)))]
    prompts = []
    for line in picked:
        cut = line[:chars]
        prompts.append(cut[: cut.rfind(" ") + 1] if len(line) > chars and " " in cut[1:] else cut)
    return prompts


def encode_inputs(tokenizer: Tokenizer, texts: Sequence[str], source: str) -> list[dict[str, Any]]:
    """Each text as ``{"index", "text", "input_ids"}`` (a literal ``<mask>`` becomes the mask id).

    A symbol outside the vocabulary (a character-level model never saw it) is an error naming the input and
    the symbols, raised before any model runs; byte-level BPE encodes every text.

    Args:
        tokenizer: the run's tokenizer.
        texts: the inputs.
        source: where they come from, for the error (``predict_file X``).
    """
    items = []
    for i, text in enumerate(texts):
        unknown = tokenizer.unknown(text.replace(tokenizer.mask_token, ""))
        if unknown:
            raise ValueError(
                f"{source}, input {i + 1} ({text[:60]!r}): {', '.join(map(repr, unknown))} not in the run's vocabulary "
                f"of {tokenizer.vocab_size} tokens; remove or replace them (the model has no embedding for them)"
            )
        items.append({"index": i, "text": text, "input_ids": encode_marked(tokenizer, text)})
    return items


def collate_lists(batch: Sequence[dict[str, Any]]) -> dict[str, list]:
    """Items of one kind → a dict of lists (inputs of different lengths stay unpadded)."""
    return {key: [item[key] for item in batch] for key in batch[0]}
