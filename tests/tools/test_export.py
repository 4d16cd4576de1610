"""`cli.py export`: a tiny trained run written as its transformers / timm equivalent, reloaded by that
library and compared with the trained suite model; the refusals and their exit statuses."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml

import cli
from datamodules.images import IMAGE_DATASETS
from lit_modules.rebuilt_run import build_run, load_weights

transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TOL = 1e-5
SMALL = {
    "gpt": [
        "--model.arch.d_model",
        "32",
        "--model.arch.n_layers",
        "1",
        "--model.sample_tokens",
        "0",
        "--data.seq_len",
        "32",
        "--data.eval_lengths",
        "[32]",
        "--data.val_tokens",
        "1024",
    ],
    "vit": ["--model.arch.d_model", "32", "--model.arch.n_layers", "1"],
}


def _train(family: str, root: Path, *extra: str) -> tuple[torch.nn.Module, dict, Path, Path]:
    """Two training steps of the family's tiny config (plus `extra` flags), checkpointed at the last: the
    trained suite model, its data_info, the run's config.yaml and its checkpoint."""
    run = cli.cli_main(
        [
            "fit",
            "-c",
            str(CONFIGS / family / "base.yaml"),
            "-c",
            str(CONFIGS / family / "tiny.yaml"),
            *SMALL[family],
            *extra,
            "--trainer.max_steps",
            "2",
            "--trainer.val_check_interval",
            "2",
            "--trainer.limit_val_batches",
            "1",
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.logger.init_args.save_dir",
            str(root),
        ]
    )
    log_dir = Path(run.trainer.log_dir)
    (ckpt,) = (log_dir / "checkpoints").glob("*.ckpt")
    return run.model.base_model.eval(), run.model.data_info, log_dir / "config.yaml", ckpt


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory):
    return _train("gpt", tmp_path_factory.mktemp("gpt"))


@pytest.fixture(scope="module")
def vit_run(tmp_path_factory):
    return _train("vit", tmp_path_factory.mktemp("vit"))


@pytest.fixture(scope="module")
def lora_run(gpt_run, tmp_path_factory):
    """LoRA fine-tuning of the GPT run, whose starting checkpoint is then deleted (as an old run's may be)."""
    root = tmp_path_factory.mktemp("lora")
    start = root / "start.ckpt"
    start.write_bytes(gpt_run[3].read_bytes())
    lora = ("--model.peft.method", "lora", "--model.peft.targets", "[q, v, ffn_in]", "--model.optim.lr", "0.05")
    run = _train("gpt", root, "--model.init_from", str(start), *lora)
    start.unlink()
    return run


def _export(config: Path, ckpt: Path, out: Path, *extra: str) -> int:
    return cli.main(["export", "--config", str(config), "--ckpt_path", str(ckpt), "--out", str(out), *extra])


def test_gpt_run_exports_to_gpt2_and_reloads(gpt_run, tmp_path, capsys):
    suite, data_info, config, ckpt = gpt_run
    assert _export(config, ckpt, tmp_path / "out") == 0
    assert "GPT2LMHeadModel.from_pretrained" in capsys.readouterr().out
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert type(loaded).__name__ == "GPT2LMHeadModel"
    ids = torch.randint(0, suite.cfg.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (loaded(ids).logits - suite(ids)).abs().max().item() < TOL
    # the data's special ids, for generation in transformers
    assert (loaded.config.bos_token_id, loaded.config.eos_token_id, loaded.config.pad_token_id) == (
        data_info["bos_token_id"],
        data_info["eos_token_id"],
        data_info["pad_token_id"],
    )
    assert loaded.generation_config.eos_token_id == data_info["eos_token_id"]


def test_vit_run_exports_to_timm_and_reloads(vit_run, tmp_path):
    suite, _, config, ckpt = vit_run
    assert _export(config, ckpt, tmp_path / "out") == 0
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"model.safetensors", "config.json"}
    loaded = timm.create_model(f"local-dir:{tmp_path / 'out'}", pretrained=True).eval()
    images = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))  # digits: 8x8, one channel
    with torch.no_grad():
        assert (loaded(images) - suite(images)).abs().max().item() < TOL
    # timm's preprocessing (pixels / 255, then its mean and std) is the DataModule's (pixels / 16, then its own)
    spec, data_config = IMAGE_DATASETS["digits"], timm.data.resolve_data_config(model=loaded)
    pixels = torch.arange(spec.max_value + 1.0)
    theirs = (pixels / 255 - data_config["mean"][0]) / data_config["std"][0]
    ours = (pixels / spec.max_value - spec.mean[0]) / spec.std[0]
    assert torch.allclose(theirs, ours, atol=1e-5) and data_config["crop_pct"] == 1.0


def test_gpu_run_of_a_compiled_model_exports_on_cpu(gpt_run, tmp_path):
    """A run trained on GPUs with DDP, bf16 and torch.compile: its trainer settings are not needed to
    export, and its checkpoint's `_orig_mod.` keys (the compiled module's) load."""
    suite, _, config, ckpt = gpt_run
    gpu = yaml.safe_load(config.read_text())
    gpu["trainer"].update(accelerator="gpu", devices=4, strategy="ddp", precision="bf16-mixed")
    gpu["model"]["init_args"]["compile"] = True
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(gpu))
    checkpoint = torch.load(ckpt, weights_only=True)
    checkpoint["state_dict"] = {
        k.replace("model.", "model._orig_mod.", 1): v for k, v in checkpoint["state_dict"].items()
    }
    torch.save(checkpoint, tmp_path / "compiled.ckpt")
    assert _export(tmp_path / "config.yaml", tmp_path / "compiled.ckpt", tmp_path / "out") == 0
    loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "out")
    assert torch.equal(loaded.transformer.wte.weight, suite.tok.weight)


def test_settings_without_equivalent_exit_1_naming_them(gpt_run, tmp_path, capsys):
    """The run's weights under a config no reference can express (scaled token embeddings): status 1,
    and each reference's mismatching settings named."""
    _, _, config, ckpt = gpt_run
    changed = yaml.safe_load(config.read_text())
    changed["model"]["init_args"]["arch"]["scale_embeddings"] = True
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(changed))
    assert _export(tmp_path / "config.yaml", ckpt, tmp_path / "out") == 1
    out = capsys.readouterr().out
    assert "error: cannot export: scale_embeddings=True has no equivalent in transformers GPT2LMHeadModel" in out
    assert "pos_encoding='learned' has no equivalent in transformers LlamaForCausalLM (it has 'rope')" in out
    assert not (tmp_path / "out").exists()


def test_a_completep_run_exports_folded_and_keeps_its_parametrization_as_a_suite_model(gpt_run, tmp_path, capsys):
    """The run's weights under CompleteP (m_N = 2, m_L = 1/2): the transformers model computes its logits, the
    multipliers folded into the weights (the tied head untied); `--format suite` writes it as it is."""
    _, _, config, ckpt = gpt_run
    changed = yaml.safe_load(config.read_text())
    changed["model"]["init_args"]["arch"].update(parametrization="completep", base_width=16, base_depth=2)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(changed))
    task, _ = build_run(tmp_path / "config.yaml")
    load_weights(task, torch.load(ckpt, weights_only=True))
    suite = task.base_model.eval()
    assert _export(tmp_path / "config.yaml", ckpt, tmp_path / "hf") == 0
    assert "parametrization='completep': its multipliers are folded into the weights" in capsys.readouterr().out
    loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    assert loaded.config.tie_word_embeddings is False
    ids = torch.randint(0, suite.cfg.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (loaded(ids).logits - suite(ids)).abs().max().item() < TOL
    assert _export(tmp_path / "config.yaml", ckpt, tmp_path / "suite", "--format", "suite") == 0
    plain = torch.load(tmp_path / "suite" / "model.pt", weights_only=True)
    assert plain["arch"]["parametrization"] == "completep" and plain["arch"]["base_width"] == 16
    assert all(torch.equal(value, suite.state_dict()[key]) for key, value in plain["state_dict"].items())


def test_missing_or_mismatched_checkpoint_exits_2(gpt_run, vit_run, tmp_path, capsys):
    _, _, gpt_config, gpt_ckpt = gpt_run
    assert _export(gpt_config, tmp_path / "nope.ckpt", tmp_path / "out") == 2
    assert f"error: --ckpt_path: {tmp_path / 'nope.ckpt'} does not exist; give a checkpoint" in capsys.readouterr().out
    (tmp_path / "notes.ckpt").write_text("not a checkpoint")
    assert _export(gpt_config, tmp_path / "notes.ckpt", tmp_path / "out") == 2
    out = capsys.readouterr().out
    assert f"error: --ckpt_path: {tmp_path / 'notes.ckpt'} is not a checkpoint (torch.save writes a zip" in out
    assert len(out.strip().splitlines()) == 1
    _, _, vit_config, _ = vit_run
    assert _export(vit_config, gpt_ckpt, tmp_path / "out") == 2
    assert "does not fit the model of" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_lora_run_exports_merged_in_both_formats(lora_run, gpt_run, tmp_path, capsys):
    """LoRA's updates (trained, so not zero) merge into the weights: the transformers model and the suite's
    plain model both give the fine-tuned model's logits, and the plain one loads with --model.init_from."""
    suite, _, config, ckpt = lora_run
    assert any(".lora_B" in k and v.abs().max() > 1e-3 for k, v in suite.state_dict().items())
    ids = torch.randint(0, suite.cfg.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        fine_tuned, start = suite(ids), gpt_run[0](ids)
        assert (fine_tuned - start).abs().max().item() > 1e-3  # LoRA changed the model
        assert _export(config, ckpt, tmp_path / "hf") == 0
        loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
        assert (loaded(ids).logits - fine_tuned).abs().max().item() < 1e-4
        assert _export(config, ckpt, tmp_path / "suite", "--format", "suite") == 0
    assert "--model.init_from" in capsys.readouterr().out
    plain = torch.load(tmp_path / "suite" / "model.pt", weights_only=True)
    assert not any("lora" in key for key in plain["state_dict"])
    run = cli.cli_main(
        [
            "fit",
            "--config",
            str(config),
            "--model.init_from",
            str(tmp_path / "suite" / "model.pt"),
            "--model.peft.method",
            "none",
            "--trainer.max_steps",
            "0",
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.logger.init_args.save_dir",
            str(tmp_path / "reloaded"),
        ]  # fmt: skip
    )
    with torch.no_grad():
        assert (run.model.base_model.eval()(ids) - fine_tuned).abs().max().item() < 1e-4


def test_adapter_run_cannot_export_merged(gpt_run, tmp_path, capsys):
    _, _, config, ckpt = _train("gpt", tmp_path / "run", "--model.peft.method", "adapter")
    assert _export(config, ckpt, tmp_path / "out", "--format", "suite") == 1
    assert "adapter weights cannot merge" in capsys.readouterr().out


def test_the_run_is_built_from_its_config_alone(gpt_run, monkeypatch):
    """Run as `cli.py export ...`, the process's own words are the export's: the run is parsed from its
    config alone, and LightningCLI's warning about command-line words beside `args` is not shown."""
    _, _, config, _ = gpt_run
    monkeypatch.setattr(sys, "argv", ["cli.py", "export", "--config", str(config), "--out", "elsewhere"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task, datamodule = build_run(config)
    assert not [w for w in caught if "args parameter" in str(w.message)]
    assert (type(task).__name__, type(datamodule).__name__) == ("CausalLM", "TextDataModule")


NEWER_FAMILIES = {
    # the flags that make the tiny GPT run one of these families, and the class `cli.py export` writes
    "olmo2": (["--model.arch.pos_encoding=rope", "--model.arch.norm=rmsnorm", "--model.arch.activation=swiglu",
               "--model.arch.bias=false", "--model.arch.norm_placement=reordered", "--model.arch.qk_norm=rmsnorm",
               "--model.arch.tie_embeddings=false"], "Olmo2ForCausalLM"),
    "qwen3": (["--model.arch.pos_encoding=rope", "--model.arch.norm=rmsnorm", "--model.arch.activation=swiglu",
               "--model.arch.bias=false", "--model.arch.qk_norm=rmsnorm", "--model.arch.qk_norm_scope=head",
               "--model.arch.n_kv_heads=2"], "Qwen3ForCausalLM"),
    "gemma2": (["--model.arch.pos_encoding=rope", "--model.arch.norm=rmsnorm", "--model.arch.norm_placement=peri",
                "--model.arch.activation=geglu", "--model.arch.gelu_approximate=tanh", "--model.arch.bias=false",
                "--model.arch.scale_embeddings=true", "--model.arch.peri_embedding_norm=false",
                "--model.arch.attn_softcap=20.0",
                "--model.arch.logit_softcap=15.0"], "Gemma2ForCausalLM"),
}  # fmt: skip


@pytest.mark.parametrize("family", list(NEWER_FAMILIES))
def test_newer_families_export_and_reload(family, tmp_path, capsys):
    """A run with QK-norm, the reordered or sandwich norms and the soft-caps exports as OLMo 2, Qwen 3 or
    Gemma 2, and transformers' reloaded model computes the trained model's logits."""
    flags, reference = NEWER_FAMILIES[family]
    suite, _, config, ckpt = _train("gpt", tmp_path / "run", *flags)
    assert _export(config, ckpt, tmp_path / "out") == 0
    assert f"{reference}.from_pretrained" in capsys.readouterr().out
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert type(loaded).__name__ == reference
    ids = torch.randint(0, suite.cfg.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (loaded(ids).logits - suite(ids)).abs().max().item() < 1e-4
