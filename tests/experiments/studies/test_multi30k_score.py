"""The Multi30k study's scorer: sacrebleu's corpus BLEU and chrF of aligned hypotheses and references."""

import json

import pytest

from experiments.studies.multi30k import score

REFERENCES = [
    "A man in an orange hat starring at something.",
    "A Boston Terrier is running on lush green grass in front of a white fence.",
    "A girl in karate uniform breaking a stick with a front kick.",
]


def test_identical_hypotheses_score_100():
    scores = score.score(list(REFERENCES), REFERENCES)
    assert scores.bleu == pytest.approx(100.0)
    assert scores.chrf == pytest.approx(100.0) and scores.chrf_pp == pytest.approx(100.0)
    assert scores.sentences == 3
    # sacrebleu's defaults: 13a tokenization, cased; chrF2 without and with word bigrams (chrF++)
    assert "tok:13a" in scores.bleu_signature and "case:mixed" in scores.bleu_signature
    assert "nw:0" in scores.chrf_signature and "nw:2" in scores.chrf_pp_signature


def test_a_perturbed_hypothesis_scores_lower():
    perturbed = [REFERENCES[0].replace("orange", "blue"), REFERENCES[1], "A boy kicks a ball."]
    scores = score.score(perturbed, REFERENCES)
    assert 0 < scores.bleu < 100 and 0 < scores.chrf < 100
    # cased: the same words in lower case are not the same tokens, except to the lowercased BLEU
    lowered = score.score([r.lower() for r in REFERENCES], REFERENCES)
    assert lowered.bleu < 100 and lowered.bleu_lowercase == pytest.approx(100.0)
    assert "case:lc" in lowered.bleu_lowercase_signature


def test_misaligned_or_undecoded_hypotheses_are_refused():
    with pytest.raises(ValueError, match="aligned"):
        score.score(REFERENCES[:2], REFERENCES)
    with pytest.raises(ValueError, match="BPE markers"):
        score.score(["A\u0120man\u0120in", *REFERENCES[1:]], REFERENCES)


def test_main_scores_a_run_folder_and_writes_bleu_md(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    records = [{"index": i, "input": f"de {i}", "output": text, "settings": {"beam_size": 4}}
               for i, text in enumerate(REFERENCES)]  # fmt: skip
    # written out of order: the scorer puts them back in input order
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reversed(records)))
    refs = tmp_path / "refs.en"
    refs.write_text("\n".join(REFERENCES) + "\n")
    assert score.main([str(run), "--references", str(refs)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("BLEU 100.00  nrefs:1|case:mixed|eff:no|tok:13a")
    table = (run / "bleu.md").read_text()
    assert "| BLEU | 100.00 |" in table and "tok:13a" in table and '"beam_size": 4' in table


def test_predictions_of_other_sources_are_named():
    sources = ["Ein Mann.", "Eine Frau."]
    assert score.source_mismatch(["Ein Mann. ", "Eine Frau."], sources) is None
    assert "input 2 is 'Ein Hund.'" in score.source_mismatch(["Ein Mann.", "Ein Hund."], sources)
    assert "(1 predictions)" in score.source_mismatch(["Ein Mann."], sources)
