"""Fine-tuning through the CLI: a pre-train, a fine-tune from its checkpoint with PEFT (trainable counts in
run.json and the ledger), and int8 evaluation of the checkpoint that the saved hparams cannot override."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cli import cli_main
from contract.run_record import read_run_record
from experiments.records.ledger import collect_row
from models.peft import trainable_parameters
from tests.datamodules.conftest import SHARED_DATA

QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
TINY = ["--model.arch.d_model=32", "--model.arch.n_layers=1", "--model.arch.n_heads=2"]
FAST = {
    "gpt": [*TINY, "--data.seq_len=16", "--data.eval_lengths=[16]", "--data.val_tokens=256", "--model.sample_tokens=0"],
    "bert": [*TINY, "--data.seq_len=16", "--data.eval_lengths=[16]", "--data.val_tokens=256"],
    "translation": [*TINY, "--trainer.limit_val_batches=1"],
}
# family -> (pre-train overlays, fine-tune overlay): the fine-tuning tasks of configs/
TASKS = {
    "gpt": (["configs/gpt/tiny.yaml"], "configs/gpt/finetune_shakespeare.yaml"),
    "bert": (["configs/bert/tiny.yaml"], "configs/bert/finetune_shakespeare.yaml"),
    "translation": (["configs/translation/tiny.yaml"], "configs/translation/finetune_scan_length.yaml"),
}


def fit(family: str, folder: Path, overlays: list[str], *args: str):
    """A 3-step run logged to folder/run, its last checkpoint in folder/run/checkpoints/last.ckpt."""
    checkpoint = {
        "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
        "init_args": {"dirpath": str(folder / "run" / "checkpoints"), "save_last": True, "save_top_k": 0},
    }
    configs = [arg for path in [f"configs/{family}/base.yaml", *overlays] for arg in ("-c", path)]
    return cli_main([
        "fit", *configs, *FAST[family], *QUIET, "--trainer.max_steps=3", "--trainer.val_check_interval=3",
        "--trainer.limit_val_batches=1", "--trainer.num_sanity_val_steps=0",
        f"--trainer.logger.init_args.save_dir={folder}", "--trainer.logger.init_args.name=run",
        "--trainer.logger.init_args.version=", "--trainer.callbacks+=" + json.dumps(checkpoint), *args,
    ])  # fmt: skip


@pytest.mark.parametrize("family", list(TASKS))
def test_pretrain_then_finetune_from_its_checkpoint(family, tmp_path):
    """Each family's fine-tuning config runs end to end from a 3-step pre-train's checkpoint, with LoRA:
    the body loads strictly, only LoRA (and the declared new head) trains, and run.json and the ledger
    record the trainable count."""
    pre_overlays, finetune = TASKS[family]
    if "../shared/data" in Path(finetune).read_text() and not SHARED_DATA.exists():
        pytest.skip(f"{SHARED_DATA} is absent: {finetune} reads its data from there")
    pre = fit(family, tmp_path / "pre", pre_overlays)
    ckpt = tmp_path / "pre" / "run" / "checkpoints" / "last.ckpt"
    cli = fit(family, tmp_path / "ft", [*pre_overlays, finetune], f"--model.init_from={ckpt}",
              "--model.peft.method=lora", "--model.peft.targets=[q,v,ffn_in]")  # fmt: skip
    model = cli.model.base_model
    loaded = pre.model.base_model.state_dict()
    replaced = {k for k, p in model.state_dict(keep_vars=True).items() if any(
        p is q for name in cli.model.init_replace for q in model.get_submodule(name).parameters())}  # fmt: skip
    # LoRA wraps its targets (`qkv.base_layer.weight`): the base weights are frozen, so still the pre-trained
    base = {k.replace(".base_layer", ""): v for k, v in model.state_dict().items() if ".lora_" not in k}
    body = [k for k in loaded if k not in {r.replace(".base_layer", "") for r in replaced}]
    assert len(body) > 10 and all(torch.equal(base[k], loaded[k]) for k in body)
    info = read_run_record(tmp_path / "ft" / "run")
    assert info.params_trainable == trainable_parameters(model) < info.params
    row = collect_row(tmp_path / "ft" / "run", "lora", 0, "done", "", {})
    assert row["params_trainable"] == str(info.params_trainable)
    assert "init_from" not in cli.model.hparams and cli.model.hparams["peft"]["method"] == "lora"


def test_int8_validation_of_a_checkpoint_is_not_overridden_by_its_hparams(tmp_path):
    fit("gpt", tmp_path, ["configs/gpt/tiny.yaml"], "--model.peft.method=lora")
    run = tmp_path / "run"
    args = ["validate", "--config", str(run / "config.yaml"), "--ckpt_path", str(run / "checkpoints/last.ckpt"), *QUIET]
    plain = cli_main(args).trainer.callback_metrics["val/loss"].item()
    cli = cli_main([*args, "--model.quantize=int8"])
    assert any(isinstance(m, torch.ao.nn.quantized.dynamic.Linear) for m in cli.model.model.modules())
    assert not any(".lora_" in name for name in cli.model.model.state_dict())  # merged before quantizing
    quantized = cli.trainer.callback_metrics["val/loss"].item()
    assert quantized != plain and abs(quantized - plain) < 0.05 * plain


def test_quantize_is_refused_for_fit(tmp_path, capsys):
    with pytest.raises(SystemExit):
        fit("gpt", tmp_path, ["configs/gpt/tiny.yaml"], "--model.quantize=int8")
    assert "model.quantize: int8 is post-training quantization" in capsys.readouterr().err
