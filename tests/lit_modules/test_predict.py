"""`cli.py predict` for every family, from a saved run as the sweep lays it out: `predictions.jsonl` in the
run's folder, the run's `tokenizer.json` checked against the data, and bad inputs named before any model runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from cli import cli_main
from contract.run_folder import TOKENIZER_FILE
from datamodules.text import TextDataModule
from datamodules.tokenization import load_tokenizer
from lit_modules import CausalLM, ImageClassifier, MaskedLM, Translation
from lit_modules.prediction_writer import PREDICTIONS_FILE, Generation
from models.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--model.arch.d_model=32", "--model.arch.n_layers=1", "--model.arch.n_heads=2"]
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
FAMILIES = {
    "gpt": [*TINY, "--data.seq_len=16", "--data.eval_lengths=[16]", "--data.val_tokens=256",
            "--model.sample_tokens=0", "--model.arch.pos_encoding=learned"],
    "bert": [*TINY, "--data.seq_len=16", "--data.eval_lengths=[16]", "--data.val_tokens=256"],
    "translation": [*TINY, "--trainer.limit_val_batches=1"],
    "vit": TINY,
}  # fmt: skip


def train(family: str, folder: Path, *args: str, name: str = "run") -> Path:
    """A 2-step run of the family's tiny config (plus `args`), laid out as the sweep does: folder/name/
    {config.yaml, tokenizer.json, checkpoints/last.ckpt}."""
    checkpoint = {
        "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
        "init_args": {"dirpath": str(folder / name / "checkpoints"), "save_last": True, "save_top_k": 0},
    }
    cli_main([
        "fit", "-c", f"configs/{family}/base.yaml", "-c", f"configs/{family}/tiny.yaml", *FAMILIES[family], *QUIET,
        "--trainer.max_steps=2", "--trainer.val_check_interval=2", "--trainer.limit_val_batches=1",
        "--trainer.num_sanity_val_steps=0", f"--trainer.logger.init_args.save_dir={folder}",
        f"--trainer.logger.init_args.name={name}", "--trainer.logger.init_args.version=",
        "--trainer.callbacks+=" + json.dumps(checkpoint), *args,
    ])  # fmt: skip
    return folder / name


def predict(run: Path, *args: str) -> list[dict]:
    """`cli.py predict --config RUN/config.yaml --ckpt_path RUN/checkpoints/last.ckpt ARGS`; its records."""
    (run / PREDICTIONS_FILE).unlink(missing_ok=True)
    config = (run / "config.yaml").read_text()
    try:
        cli_main(["predict", "--config", str(run / "config.yaml"), "--ckpt_path", str(run / "checkpoints/last.ckpt"),
                  *QUIET, *args])  # fmt: skip
    finally:  # the next test's predict starts from the training config (test_predict_keeps_the_runs_config)
        (run / "config.yaml").write_text(config)
    return [json.loads(line) for line in (run / PREDICTIONS_FILE).read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    return {}


def saved_run(runs: dict[str, Path], family: str, tmp_path_factory) -> Path:
    if family not in runs:  # each family trains once for the module's tests
        runs[family] = train(family, tmp_path_factory.mktemp(family))
    return runs[family]


def refusal(capsys, call) -> str:
    """What `cli.py` says when it refuses a run: exit status 2, and `error: <key>: <message>` on stderr."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        call()
    assert exit_info.value.code == 2
    return " ".join(capsys.readouterr().err.split())


def lines(tmp_path: Path, *texts: str) -> str:
    path = tmp_path / "inputs.txt"
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    return str(path)


def test_predict_settings_are_validated_and_not_saved_as_hyperparameters():
    with pytest.raises(ConfigError, match=r"temperature=-1 must be >= 0 \(0: greedy\)"):
        Generation(temperature=-1)
    with pytest.raises(ConfigError, match="top_k=0 must be a positive integer"):
        Generation(top_k=0)
    with pytest.raises(ConfigError, match=r"predict_beam_size=0 must be a positive integer \(1: greedy\)"):
        Translation(predict_beam_size=0)
    with pytest.raises(ConfigError, match="predict_top_k=0 must be a positive integer"):
        ImageClassifier(predict_top_k=0)
    # LightningCLI puts a checkpoint's hparams over the command line's values: these must not be among them
    text, pairs = {"vocab_size": 40, "seq_len": 16}, {"vocab_size": 40, "max_len": 12}
    modules = [CausalLM(generation=Generation(temperature=0), data_info=text),
               MaskedLM(predict_top_k=3, data_info=text), Translation(predict_beam_size=4, data_info=pairs),
               ImageClassifier(predict_top_k=2)]  # fmt: skip
    for module, key in zip(modules, ("generation", "predict_top_k", "predict_beam_size", "predict_top_k")):
        assert key not in module.hparams and "optim" in module.hparams
    assert modules[2].predict_settings() == {"beam_size": 4, "length_penalty": 1.0, "max_len": 12}
    assert Translation(beam_size=3).predict_beam_size == 3  # unset: the run's


def test_gpt_continues_prompts_greedily_as_generate_does(runs, tmp_path_factory, tmp_path, capsys):
    run = saved_run(runs, "gpt", tmp_path_factory)
    prompts = ["The value", "", "def f(x):"]  # the blank line is skipped
    records = predict(run, f"--data.predict_file={lines(tmp_path, *prompts)}", "--model.generation.temperature=0",
                      "--model.generation.max_new_tokens=6")  # fmt: skip
    assert [r["input"] for r in records] == ["The value", "def f(x):"] and [r["index"] for r in records] == [0, 1]
    assert records[0]["settings"] == {"max_new_tokens": 6, "temperature": 0.0, "top_k": None, "seed": 0,
                                      "checkpoint": str(run / "checkpoints/last.ckpt")}  # fmt: skip
    assert f"2 predictions in {run / PREDICTIONS_FILE}" in capsys.readouterr().out
    # the same greedy continuation as the trained weights give without the KV cache
    model = CausalLM.load_from_checkpoint(run / "checkpoints/last.ckpt").eval()
    tokenizer = load_tokenizer(run / TOKENIZER_FILE)
    for record in records:
        ids = torch.tensor([tokenizer.encode(record["input"])])
        out = model.model.generate(ids, 6, temperature=0, use_cache=False)
        assert record["output"] == tokenizer.decode(out[0, ids.shape[1] :].tolist())


def test_gpt_sampling_is_seeded_and_stops_at_learned_positions(runs, tmp_path_factory, tmp_path):
    run = saved_run(runs, "gpt", tmp_path_factory)
    prompts = lines(tmp_path, "a" * 20, "In the")  # learned positions: 16; the first prompt alone is longer
    sample = ["--data.predict_file=" + prompts, "--model.generation.max_new_tokens=30", "--model.generation.top_k=5"]
    first, again = predict(run, *sample), predict(run, *sample)
    assert [r["output"] for r in first] == [r["output"] for r in again]  # the seed fixes the samples
    assert first[0]["note"] == "prompt cut to its last 15 tokens; 1 new tokens: learned positions end at 16"
    assert first[1]["note"] == "10 new tokens: learned positions end at 16"
    assert len(first[1]["output"]) <= 10


def test_bert_lists_fills_of_each_mask(runs, tmp_path_factory, tmp_path, capsys):
    run = saved_run(runs, "bert", tmp_path_factory)
    records = predict(run, f"--data.predict_file={lines(tmp_path, 'Th<mask> cl<mask>ss', 'return value')}",
                      "--model.predict_top_k=3")  # fmt: skip
    masked, plain = records
    assert [m["position"] for m in masked["output"]] == [2, 6]
    for mask in masked["output"]:
        probabilities = [f["probability"] for f in mask["fills"]]
        assert len(probabilities) == 3 and probabilities == sorted(probabilities, reverse=True)
        assert sum(probabilities) <= 1
        assert all(f["id"] > 4 for f in mask["fills"])  # no special token is a fill
    fills = [m["fills"][0]["token"] for m in masked["output"]]
    assert masked["filled"] == f"Th{fills[0]} cl{fills[1]}ss" and masked["settings"]["top_k"] == 3
    # no <mask>: the middle token is hidden, and the record says which
    assert plain["input"] == "return<mask>value" and plain["expected"] == " "
    assert "'Th<mask> cl<mask>ss' -> " in capsys.readouterr().out


def test_translation_decodes_validation_sources_with_beam_search(runs, tmp_path_factory):
    run = saved_run(runs, "translation", tmp_path_factory)
    records = predict(run, "--model.predict_beam_size=2")  # no predict_file: the first validation sources
    assert len(records) == 4 and all(r["reference"] and isinstance(r["output"], str) for r in records)
    assert records[0]["settings"] == {"beam_size": 2, "length_penalty": 1.0, "max_len": 64,
                                      "checkpoint": str(run / "checkpoints/last.ckpt")}  # fmt: skip
    assert set(records[0]["output"].split()) <= {"I_WALK", "I_LOOK", "I_RUN", "I_JUMP", "I_TURN_LEFT", "I_TURN_RIGHT",
                                                 "walk", "look", "run", "jump", "left", "right", "turn", "and",
                                                 "after", "twice", "thrice", "opposite", "around"}  # fmt: skip


def test_translation_refuses_a_word_outside_the_vocabulary(runs, tmp_path_factory, tmp_path, capsys):
    run = saved_run(runs, "translation", tmp_path_factory)
    inputs = lines(tmp_path, "jump twice", "walk quickly")
    error = refusal(capsys, lambda: predict(run, f"--data.predict_file={inputs}"))
    assert f"error: data: predict_file {inputs}, input 2 ('walk quickly'): 'quickly' not in the run's" in error


def _png(path: Path, value: int) -> None:
    Image.fromarray(np.full((16, 16), value, dtype=np.uint8)).save(path)


def test_vit_classifies_a_folder_of_images(runs, tmp_path_factory, tmp_path, capsys):
    run = saved_run(runs, "vit", tmp_path_factory)
    _png(tmp_path / "b.png", 200)
    _png(tmp_path / "a.png", 0)
    (tmp_path / "notes.txt").write_text("not an image: skipped")
    records = predict(run, f"--data.predict_file={tmp_path}", "--model.predict_top_k=4")
    assert [r["input"] for r in records] == [str(tmp_path / "a.png"), str(tmp_path / "b.png")]
    for record in records:
        probabilities = [c["probability"] for c in record["output"]]
        assert len(probabilities) == 4 and probabilities == sorted(probabilities, reverse=True)
        assert {c["class"] for c in record["output"]} <= set("0123456789") and "label" not in record
    labelled = predict(run)  # no predict_file: test images, with their labels
    assert [r["input"] for r in labelled] == [f"test[{i}]" for i in range(4)] and all("label" in r for r in labelled)
    (tmp_path / "broken.png").write_bytes(b"not a png")
    error = refusal(capsys, lambda: predict(run, f"--data.predict_file={tmp_path}"))
    assert f"error: data: {tmp_path / 'broken.png'}: not a readable image" in error


def test_run_saves_its_tokenizer_and_refuses_data_that_disagrees(runs, tmp_path_factory, tmp_path, capsys):
    run = saved_run(runs, "gpt", tmp_path_factory)
    saved = json.loads((run / TOKENIZER_FILE).read_text())
    data = TextDataModule(**yaml.safe_load((run / "config.yaml").read_text())["data"]["init_args"])
    assert saved == data.tokenizer.to_dict() and saved["kind"] == "char"
    # the corpus "changed": two symbols of the run's vocabulary swapped places
    tokens = saved["tokens"]
    changed = dict(saved, tokens=[*tokens[:10], tokens[11], tokens[10], *tokens[12:]])
    copy = tmp_path / "run"
    (copy / "checkpoints").mkdir(parents=True)
    (copy / "checkpoints/last.ckpt").symlink_to(run / "checkpoints/last.ckpt")
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["trainer"]["logger"]["init_args"]["save_dir"] = str(tmp_path)  # the copy logs to itself
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    (copy / TOKENIZER_FILE).write_text(json.dumps(changed))
    prompts = f"--data.predict_file={lines(tmp_path, 'The')}"
    error = refusal(capsys, lambda: predict(copy, prompts))
    assert re.search(rf"error: data: the run's tokenizer {copy / TOKENIZER_FILE} \(char, \d+ tokens, sha256 \w+\) and "
                     r"the data's tokenizer \(TextDataModule: char, \d+ tokens, sha256 \w+\) differ, first at id 10",
                     error)  # fmt: skip
    assert f"--data.tokenizer_file {copy / TOKENIZER_FILE}" in error
    # with the run's own vocabulary the data agrees with it, and no corpus is needed to predict
    records = predict(copy, prompts, f"--data.tokenizer_file={copy / TOKENIZER_FILE}")
    assert len(records) == 1
    # a vocabulary of another size: refused before the weights load
    (copy / TOKENIZER_FILE).unlink()
    grown = tmp_path / "grown.json"
    grown.write_text(json.dumps(dict(saved, tokens=[*saved["tokens"], "€"])))
    error = refusal(capsys, lambda: predict(copy, prompts, f"--data.tokenizer_file={grown}"))
    assert re.search(r"error: data: the checkpoint was trained on other data: vocab_size=(\d+) in the checkpoint, "
                     r"(\d+) now", error)  # fmt: skip


def test_fit_in_a_folder_whose_tokenizer_differs_is_refused(runs, tmp_path_factory, tmp_path, capsys):
    vit = saved_run(runs, "vit", tmp_path_factory)  # images have no tokenizer: nothing saved, nothing checked
    assert not (vit / TOKENIZER_FILE).exists()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / TOKENIZER_FILE).write_text(json.dumps({"kind": "char", "tokens": ["<pad>"]}))
    error = refusal(capsys, lambda: train("gpt", tmp_path))  # resuming on changed data, say
    assert f"error: data: the run's tokenizer {tmp_path / 'run' / TOKENIZER_FILE} (char, 1 tokens" in error


def test_predict_keeps_the_runs_config(runs, tmp_path_factory, tmp_path):
    """The run's config.yaml re-runs its training: a predict must not replace it with its own (whose
    `return_predictions` key `fit` refuses, and whose predict_file the next predict would inherit)."""
    run = saved_run(runs, "gpt", tmp_path_factory)
    before, folders = (run / "config.yaml").read_text(), sorted(run.parent.iterdir())
    events = sorted(run.glob("events.out.tfevents.*"))
    cli_main(["predict", "--config", str(run / "config.yaml"), "--ckpt_path", str(run / "checkpoints/last.ckpt"),
              *QUIET, f"--data.predict_file={lines(tmp_path, 'The')}"])  # fmt: skip
    after = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(before)
    assert after == before
    assert "predict_file" in (run / "predict_config.yaml").read_text()  # the predict's own, beside it
    # it logs no metric: no events file of its own in the run, no new log folder beside it
    assert sorted(run.glob("events.out.tfevents.*")) == events and sorted(run.parent.iterdir()) == folders


def test_predict_under_ddp_writes_the_same_records_once(runs, tmp_path_factory, tmp_path):
    """2 processes each predict their share; the records are gathered and written once, in input order."""
    run = saved_run(runs, "gpt", tmp_path_factory)
    prompts = lines(tmp_path, *(f"The {word}" for word in ("first", "second", "third", "fourth", "fifth")))
    args = [f"--data.predict_file={prompts}", "--data.batch_size=2", "--model.generation.max_new_tokens=4"]
    one = predict(run, *args)
    command = [sys.executable, "cli.py", "predict", "--config", str(run / "config.yaml"), "--ckpt_path",
               str(run / "checkpoints/last.ckpt"), *QUIET, *args, "--trainer.strategy=ddp", "--trainer.devices=2",
               "--trainer.accelerator=cpu"]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=os.environ | {"OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    two = [json.loads(line) for line in (run / PREDICTIONS_FILE).read_text().splitlines()]
    assert two == one and done.stdout.count("5 predictions in") == 1
