"""Corpus BLEU and chrF of a run's Multi30k test2016 translations, with the sacrebleu library itself.

Reads the `predictions.jsonl` that `cli.py predict` wrote from the German test2016 sources (a run folder,
or the file), takes each record's `output` (the translation, BPE already decoded to text by the run's
tokenizer) in input order, and scores it against the raw English test2016 lines (`test_2016_flickr.en.gz`,
checksum-verified as the DataModule reads it), untouched: sacrebleu tokenizes both sides itself.
`sacrebleu.metrics.BLEU()` with its defaults (13a tokenization, cased, exponential smoothing), chrF
(`CHRF()`: character 6-grams, beta 2) and chrF++ (`CHRF(word_order=2)`, what the run's `test/chrf` is).
Prints the scores with their sacrebleu signatures and writes `bleu.md` beside the predictions.

    python -m experiments.studies.multi30k.score RUN --data-dir ../shared/data/multi30k
    python -m experiments.studies.multi30k.score hyps.jsonl --references refs.en   # any reference file

The predictions must be of the test sources, one per line in order: with the default references their
inputs are checked against the German test2016 lines.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF

from contract.files import write_atomic
from datamodules.download import DEFAULT_CACHE_DIR
from datamodules.translation import DATASETS, read_aligned_lines
from lit_modules.prediction_writer import PREDICTIONS_FILE

OUTPUT = "bleu.md"
# byte-level BPE's stand-ins for a space and a newline: in a hypothesis they mean tokens, not decoded text
BPE_MARKERS = ("\u0120", "\u010a")


@dataclass(frozen=True)
class Scores:
    bleu: float
    bleu_signature: str
    bleu_detail: str  # sacrebleu's one-line score: n-gram precisions, brevity penalty, lengths
    bleu_lowercase: float  # what lowercased, tokenized BLEUs (torchtext's, Trevett's tutorial) compare with
    bleu_lowercase_signature: str
    chrf: float
    chrf_signature: str
    chrf_pp: float
    chrf_pp_signature: str
    sentences: int


def score(hypotheses: list[str], references: list[str]) -> Scores:
    """Corpus BLEU (sacrebleu defaults), chrF and chrF++ of aligned hypotheses and references (one each)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references: they must be aligned")
    marked = [i for i, h in enumerate(hypotheses) if any(m in h for m in BPE_MARKERS)]
    if marked:
        raise ValueError(
            f"hypothesis {marked[0] + 1} ({hypotheses[marked[0]][:60]!r}) and {len(marked) - 1} more hold byte-level "
            "BPE markers (Ġ, Ċ): score the decoded text (cli.py predict's `output`), not tokens"
        )
    bleu, bleu_lc, chrf, chrf_pp = BLEU(), BLEU(lowercase=True), CHRF(), CHRF(word_order=2)
    b = bleu.corpus_score(hypotheses, [references])
    lc = bleu_lc.corpus_score(hypotheses, [references])
    c = chrf.corpus_score(hypotheses, [references])
    cpp = chrf_pp.corpus_score(hypotheses, [references])
    return Scores(
        b.score, str(bleu.get_signature()), str(b), lc.score, str(bleu_lc.get_signature()),
        c.score, str(chrf.get_signature()), cpp.score, str(chrf_pp.get_signature()), len(hypotheses),
    )  # fmt: skip


def read_predictions(path: Path) -> list[dict]:
    """The records of a `predictions.jsonl` (or of a run folder's), in input order."""
    path = path / PREDICTIONS_FILE if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run `cli.py predict` on the test sources first")
    with path.open(encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    return sorted(records, key=lambda r: r["index"])


def test2016(data_dir: str | None, cache_dir: str) -> tuple[list[str], list[str]]:
    """German sources and English references of Multi30k test2016, raw (the DataModule's own reader)."""
    pairs = DATASETS["multi30k"].load("simple", 0, data_dir, cache_dir).test  # split and seed do not apply
    return [de for de, _ in pairs], [en for _, en in pairs]


def _cell(text: str) -> str:
    """`text` inside a markdown table cell: its pipes escaped (a signature is `|`-separated)."""
    return text.replace("|", "\\|")


def source_mismatch(inputs: list[str], sources: list[str]) -> str | None:
    """Why the predictions' inputs are not the test sources in order; `None` when they are."""
    wrong = next((i for i, (a, b) in enumerate(zip(inputs, sources)) if a.strip() != b.strip()), None)
    if len(inputs) == len(sources) and wrong is None:
        return None
    where = "" if wrong is None else f"; input {wrong + 1} is {inputs[wrong][:60]!r}, not {sources[wrong][:60]!r}"
    return (
        f"the predictions are not of the {len(sources)} test2016 sources in order ({len(inputs)} predictions{where}): "
        "predict with --data.predict_file on the unzipped test_2016_flickr.de"
    )


def report(scores: Scores, predictions: Path, references: str, settings: dict | None) -> str:
    lines = [
        "# Multi30k De→En test2016: corpus scores (sacrebleu)",
        "",
        f"Predictions: `{predictions}` ({scores.sentences} sentences); references: {references}.",
    ]
    if settings:
        lines.append(f"Decoding (`cli.py predict`): {json.dumps(settings)}.")
    lines += [
        "",
        "| metric | score | sacrebleu signature |",
        "|---|---:|---|",
        f"| BLEU | {scores.bleu:.2f} | `{_cell(scores.bleu_signature)}` |",
        f"| BLEU, lowercased | {scores.bleu_lowercase:.2f} | `{_cell(scores.bleu_lowercase_signature)}` |",
        f"| chrF | {scores.chrf:.2f} | `{_cell(scores.chrf_signature)}` |",
        f"| chrF++ | {scores.chrf_pp:.2f} | `{_cell(scores.chrf_pp_signature)}` |",
        "",
        f"`{scores.bleu_detail}`",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("predictions", type=Path, help="a run folder with predictions.jsonl, or the file")
    parser.add_argument("--references", type=Path, help="reference lines (text or .gz); default: test2016 English")
    parser.add_argument("--data-dir", help="folder of the Multi30k *.gz files (default: download into the cache)")
    parser.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR)
    parser.add_argument("--out", type=Path, help=f"where to write the table (default: {OUTPUT} beside the predictions)")
    args = parser.parse_args(argv)

    records = read_predictions(args.predictions)
    hypotheses = [r["output"] for r in records]
    if args.references:
        references, described = read_aligned_lines(args.references), f"`{args.references}`"
    else:
        sources, references = test2016(args.data_dir, args.cache_dir)
        described = "Multi30k `test_2016_flickr.en.gz` (raw, SHA-256 checked)"
        problem = source_mismatch([r.get("input", "") for r in records], sources)
        if problem:
            raise SystemExit(f"error: {problem}")
    scores = score(hypotheses, references)
    folder = args.predictions if args.predictions.is_dir() else args.predictions.parent
    text = report(scores, args.predictions, described, records[0].get("settings") if records else None)
    write_atomic(args.out or folder / OUTPUT, text)
    print(f"BLEU {scores.bleu:.2f}  {scores.bleu_signature}")
    print(f"BLEU (lowercased) {scores.bleu_lowercase:.2f}  {scores.bleu_lowercase_signature}")
    print(f"  {scores.bleu_detail}")
    print(f"chrF {scores.chrf:.2f}  {scores.chrf_signature}")
    print(f"chrF++ {scores.chrf_pp:.2f}  {scores.chrf_pp_signature}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
