"""`--averaging.*` through `cli.py`: every family trains and evaluates its average beside its trained weights; a
run's `cli.py test` records `test_avg/*` beside `test/*`; `cli.py predict --averaging.predict_with averaged` and
`cli.py export --weights averaged` use the checkpoint's average, and refuse a checkpoint that has none."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import cli
from contract.run_record import read_run_record
from experiments.records.ledger import collect_row, is_metric_column
from lit_modules.averaging import AVERAGED_STATE, AVERAGING_INFO
from lit_modules.prediction_writer import PREDICTIONS_FILE

TINY = ["--model.arch.d_model=32", "--model.arch.n_layers=1", "--model.arch.n_heads=2"]
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
FAMILIES = {
    "gpt": [*TINY, "--data.seq_len=16", "--data.eval_lengths=[16,32]", "--data.val_tokens=256",
            "--model.sample_tokens=8", "--model.arch.pos_encoding=rope"],
    "bert": [*TINY, "--data.seq_len=16", "--data.eval_lengths=[16]", "--data.val_tokens=256"],
    "translation": TINY,
    "vit": [*TINY, "--data.eval_image_sizes=[8,16]"],
}  # fmt: skip
AVERAGING = {  # each family under one kind: 4 steps, the uniform average over the last 2
    "gpt": ["--averaging.kind=ema", "--averaging.half_life_tokens=256"],
    "bert": ["--averaging.kind=uniform", "--averaging.last_fraction=0.5"],
    "translation": ["--averaging.kind=ema", "--averaging.decay=0.5"],
    "vit": ["--averaging.kind=uniform", "--averaging.last_fraction=0.5"],
}


def fit(family: str, folder: Path, *args: str) -> cli.cli_main:
    """A 4-step run of the family's tiny config, validated at the end on one batch, laid out as the sweep does:
    folder/run/{config.yaml, checkpoints/last.ckpt}."""
    checkpoint = {
        "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
        "init_args": {"dirpath": str(folder / "run" / "checkpoints"), "save_last": True, "save_top_k": 0},
    }
    return cli.cli_main([
        "fit", "-c", f"configs/{family}/base.yaml", "-c", f"configs/{family}/tiny.yaml", *FAMILIES[family], *QUIET,
        "--trainer.max_steps=4", "--trainer.val_check_interval=4", "--trainer.limit_val_batches=1",
        "--trainer.limit_test_batches=1", "--trainer.num_sanity_val_steps=0",
        f"--trainer.logger.init_args.save_dir={folder}", "--trainer.logger.init_args.name=run",
        "--trainer.logger.init_args.version=", "--trainer.callbacks+=" + json.dumps(checkpoint), *args,
    ])  # fmt: skip


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_evaluates_its_average_beside_its_trained_weights(family, tmp_path):
    run = fit(family, tmp_path, *AVERAGING[family])
    metrics = {k: float(v) for k, v in run.trainer.callback_metrics.items()}
    trained = {k for k in metrics if k.startswith("val/")}
    assert "val/loss" in trained and {k.replace("val_avg/", "val/") for k in metrics if "_avg/" in k} == trained
    assert metrics["val_avg/loss"] != metrics["val/loss"] and math.isfinite(metrics["val_avg/loss"])
    checkpoint = torch.load(tmp_path / "run/checkpoints/last.ckpt", weights_only=True)
    assert checkpoint[AVERAGING_INFO]["n_averaged"] == (4 if "ema" in AVERAGING[family][0] else 2)


@pytest.fixture(scope="module")
def vit_run(tmp_path_factory) -> Path:
    """A ViT run with a uniform average, and beside its checkpoint two made from it: `average.ckpt`, whose trained
    weights are the average, and `plain.ckpt`, without an average."""
    folder = tmp_path_factory.mktemp("vit")
    fit("vit", folder, *AVERAGING["vit"])
    run = folder / "run"
    checkpoint = torch.load(run / "checkpoints/last.ckpt", weights_only=True)
    torch.save(checkpoint | {"state_dict": checkpoint[AVERAGED_STATE]}, run / "checkpoints/average.ckpt")
    plain = {k: v for k, v in checkpoint.items() if k not in (AVERAGED_STATE, AVERAGING_INFO)}
    torch.save(plain, run / "checkpoints/plain.ckpt")
    return run


def command(run: Path, subcommand: str, checkpoint: str, *args: str) -> None:
    config = (run / "config.yaml").read_text()
    try:
        cli.cli_main([subcommand, "--config", str(run / "config.yaml"), "--ckpt_path",
                      str(run / "checkpoints" / checkpoint), *QUIET, *args])  # fmt: skip
    finally:  # the run's config.yaml stays its training's
        (run / "config.yaml").write_text(config)


def predictions(run: Path, checkpoint: str, *args: str) -> list[dict]:
    command(run, "predict", checkpoint, *args)
    return [json.loads(line) for line in (run / PREDICTIONS_FILE).read_text().splitlines()]


def test_a_runs_test_records_the_average_beside_the_trained_weights(vit_run):
    command(vit_run, "test", "last.ckpt")
    tested = read_run_record(vit_run).test.metrics
    assert {"test/loss", "test/acc", "test_avg/loss", "test_avg/acc"} <= tested.keys()
    assert tested["test_avg/loss"] != tested["test/loss"]
    # the sweep's ledger row keeps both weights' validation and test metrics
    row = collect_row(vit_run, "cell", 0, "done", "", {})
    assert {"val/loss", "val_avg/loss", "val_avg/acc@16", "test/loss", "test_avg/loss"} <= row.keys()
    assert all(is_metric_column(k) for k in ("val_avg/loss", "test_avg/acc")) and not is_metric_column("avg/loss")
    command(vit_run, "test", "average.ckpt", "--averaging.kind=none")  # the average as the trained weights
    alone = read_run_record(vit_run).test.metrics
    assert alone.keys() == {k for k in tested if k.startswith("test/")}
    assert alone["test/loss"] == pytest.approx(tested["test_avg/loss"], rel=1e-6)


def test_predict_uses_the_average_when_asked(vit_run, capsys):
    raw = predictions(vit_run, "last.ckpt")
    averaged = predictions(vit_run, "last.ckpt", "--averaging.predict_with=averaged")
    assert "weights" not in raw[0]["settings"] and averaged[0]["settings"]["weights"] == "averaged"
    assert [r["output"] for r in averaged] != [r["output"] for r in raw]
    as_trained = predictions(vit_run, "average.ckpt")
    assert [r["output"] for r in averaged] == [r["output"] for r in as_trained]
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        predictions(vit_run, "plain.ckpt", "--averaging.predict_with=averaged")
    assert refused.value.code == 2 and "has no averaged weights" in capsys.readouterr().err


def test_export_writes_the_average_when_asked(vit_run, tmp_path, capsys):
    def export(checkpoint: str, *args: str) -> int:
        ckpt = vit_run / "checkpoints" / checkpoint
        argv = ["export", "--config", str(vit_run / "config.yaml"), "--ckpt_path", str(ckpt), "--out", str(tmp_path)]
        return cli.main([*argv, "--format", "suite", *args])

    average = torch.load(vit_run / "checkpoints/last.ckpt", weights_only=True)[AVERAGED_STATE]
    assert export("last.ckpt", "--weights", "averaged") == 0
    written = torch.load(tmp_path / "model.pt", weights_only=True)["state_dict"]
    assert written.keys() == {k.removeprefix("model.") for k in average}
    assert all(torch.equal(written[k.removeprefix("model.")], v) for k, v in average.items())
    assert export("last.ckpt") == 0  # the trained weights, by default
    trained = torch.load(tmp_path / "model.pt", weights_only=True)["state_dict"]
    assert not all(torch.equal(trained[k.removeprefix("model.")], v) for k, v in average.items())
    capsys.readouterr()
    assert export("plain.ckpt", "--weights", "averaged") == 2
    assert "error: --weights averaged:" in capsys.readouterr().out
