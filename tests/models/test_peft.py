"""PEFT (LoRA, adapters, BitFit), freezing and starting from weights: only the intended parameters train,
LoRA merges exactly, and a weights file that does not fit is refused with every mismatched key."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from lit_modules.int8 import quantize_model
from lit_modules.rebuilt_run import export_merged
from models import GPT, ArchConfig, BertMLM, EncoderDecoder
from models.config import ConfigError
from models.finetune import load_weights, read_weights, set_trainable
from models.peft import PeftConfig, merge_lora, trainable_parameters

CFG = ArchConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, max_seq_len=16)


def _gpt(**peft) -> GPT:
    torch.manual_seed(0)
    model = GPT(CFG)
    set_trainable(model, PeftConfig(**peft))
    return model


def _train(model: nn.Module, steps: int = 3) -> None:
    """A few AdamW steps (with weight decay) on a loss every parameter feeds."""
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.1)
    x = torch.randint(0, CFG.vocab_size, (4, 16), generator=torch.Generator().manual_seed(1))
    for _ in range(steps):
        model(x).logsumexp(-1).mean().backward()
        opt.step()
        opt.zero_grad()


def _frozen_unchanged(model: nn.Module, steps: int = 3) -> tuple[set[str], set[str], int]:
    """Trains `model`; returns (names of the parameters that changed, names that require grad, elements
    that changed)."""
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    _train(model, steps)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    elements = sum(int((p != before[n]).sum()) for n, p in model.named_parameters())
    return changed, {n for n, p in model.named_parameters() if p.requires_grad}, elements


@pytest.mark.parametrize(
    "peft",
    [
        dict(method="lora", targets=("q", "v", "out", "ffn_in", "ffn_out")),
        dict(method="adapter"),
        dict(method="adapter", placement="pfeiffer"),
        dict(method="bitfit"),
    ],
)
def test_only_the_methods_parameters_train_and_frozen_weights_are_bit_identical(peft):
    model = _gpt(**peft)
    changed, trainable, elements = _frozen_unchanged(model)
    assert changed == trainable, "a frozen weight moved, or a trainable one never did"
    own = {"lora": ".lora_", "adapter": ".adapter.", "bitfit": "bias"}[peft["method"]]
    assert trainable and all(own in name for name in trainable)
    assert trainable_parameters(model) == elements  # every counted element moved; LoRA's held k rows did not
    assert trainable_parameters(model) < model.num_parameters() / 3


def test_lora_on_q_and_v_leaves_k_effective_weight_unchanged():
    """q, k, v are one fused Linear: LoRA's B rows of k are held at zero, so k's merged weight is the base's."""
    model = _gpt(method="lora", targets=("q", "v"))
    qkv = model.stack.blocks[0].attn.qkv
    base = qkv.base_layer.weight.detach().clone()
    _train(model)
    merge_lora(model)
    merged = model.stack.blocks[0].attn.qkv.weight
    d = CFG.d_model
    assert torch.equal(merged[d : 2 * d], base[d : 2 * d])  # k: untouched
    assert not torch.equal(merged[:d], base[:d]) and not torch.equal(merged[2 * d :], base[2 * d :])
    # per layer: A (r×d) + B's q and v rows (2d×r); k's rows are not counted as trainable
    assert trainable_parameters(_gpt(method="lora", targets=("q", "v"))) == CFG.n_layers * (8 * d + 2 * d * 8)


def test_lora_reaches_cross_attention_and_every_family():
    torch.manual_seed(0)
    cfg = ArchConfig(vocab_size=40, d_model=32, n_layers=1, n_heads=4, max_seq_len=16)
    model = EncoderDecoder(cfg)
    set_trainable(model, PeftConfig(method="lora", targets=("q", "k")))
    names = {n.rsplit(".lora_", 1)[0] for n, _ in model.named_parameters() if ".lora_" in n}
    assert {"encoder.blocks.0.attn.qkv", "decoder.blocks.0.cross.q", "decoder.blocks.0.cross.kv"} <= names
    assert model.get_submodule("decoder.blocks.0.cross.kv").lora_rows.flatten().tolist() == [1.0] * 32 + [0.0] * 32
    bert = BertMLM(cfg)
    set_trainable(bert, PeftConfig(method="lora", targets=("ffn_out",)))
    assert {n for n, p in bert.named_parameters() if p.requires_grad} == {
        "stack.blocks.0.ffn.down.lora_A.default.weight", "stack.blocks.0.ffn.down.lora_B.default.weight"
    }  # fmt: skip


def test_lora_merge_is_exact_and_the_export_loads_as_a_plain_model(tmp_path):
    model = _gpt(method="lora", targets=("q", "k", "v", "out", "ffn_in", "ffn_out"))
    _train(model)
    model.eval()
    x = torch.randint(0, CFG.vocab_size, (2, 16))
    with torch.no_grad():
        expected = model(x)
    path = export_merged(model, tmp_path / "merged.pt")
    assert any(".lora_" in n for n, _ in model.named_parameters())  # the trained model is left as it was
    plain = GPT(CFG).eval()
    saved = torch.load(path, weights_only=True)
    plain.load_state_dict(saved["state_dict"])  # strict: the exact keys of a plain GPT
    assert saved["arch"]["d_model"] == CFG.d_model
    with torch.no_grad():
        torch.testing.assert_close(plain(x), expected, atol=1e-5, rtol=1e-5)
        merged = merge_lora(model)
        assert not any(".lora_" in k for k in merged.state_dict())
        torch.testing.assert_close(merged(x), expected, atol=1e-5, rtol=1e-5)
    again = GPT(CFG).eval()
    load_weights(again, read_weights(path))  # and as `--model.init_from`
    assert torch.equal(again(x), plain(x))


def test_adapters_start_as_the_identity():
    x = torch.randint(0, CFG.vocab_size, (2, 16))
    for placement, per_block in (("houlsby", 2), ("pfeiffer", 1)):  # GPT blocks: attention and FFN
        torch.manual_seed(0)
        model = GPT(CFG).eval()
        expected = model(x)
        set_trainable(model, PeftConfig(method="adapter", placement=placement, rank=4))
        assert sum(n.endswith("adapter.down.weight") for n in model.state_dict()) == per_block * CFG.n_layers
        assert torch.equal(model(x), expected)


def test_adapters_cannot_be_exported_merged(tmp_path):
    with pytest.raises(ConfigError, match="adapter weights cannot merge"):
        export_merged(_gpt(method="adapter"), tmp_path / "m.pt")


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(method="prefix"), "model.peft.method: 'prefix' is not one of none, lora, adapter, bitfit"),
        (dict(targets=("q", "qkv")), "model.peft.targets: .* from q, k, v, out, ffn_in, ffn_out"),
        (dict(targets=()), "model.peft.targets"),
        (dict(rank=0), "model.peft.rank: 0 must be at least 1"),
        (dict(dropout=1.0), r"model.peft.dropout: 1.0 must be in \[0, 1\)"),
    ],
)
def test_invalid_peft_settings_name_field_and_fix(fields, message):
    with pytest.raises(ConfigError, match=message):
        PeftConfig(**fields)


def test_freeze_policies():
    torch.manual_seed(0)
    model = GPT(CFG)
    set_trainable(model, PeftConfig(), freeze="all_but_head")
    # the tied head is the token embedding: only it trains
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {"tok.weight"}
    model = GPT(CFG)
    set_trainable(model, PeftConfig(), freeze="embeddings")
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {"tok.weight", "stack.pos.table.weight"}
    with pytest.raises(ConfigError, match="model.freeze: none trains every base weight"):
        set_trainable(GPT(CFG), PeftConfig(method="lora"), freeze="none")
    with pytest.raises(ConfigError, match="bitfit .* --model.arch.bias true"):
        set_trainable(GPT(replace(CFG, bias=False)), PeftConfig("bitfit"))


def test_init_from_mismatch_lists_every_key_and_a_declared_head_is_replaced(tmp_path):
    torch.manual_seed(0)
    source = GPT(CFG)
    torch.save({"state_dict": source.state_dict()}, tmp_path / "w.pt")
    other_vocab = ArchConfig(vocab_size=60, d_model=32, n_layers=2, n_heads=4, max_seq_len=16)
    with pytest.raises(ConfigError) as error:
        load_weights(GPT(other_vocab), read_weights(tmp_path / "w.pt"), source="w.pt")
    text = str(error.value)
    assert "lm_head.weight (shape (40, 32) in the file, (60, 32) here)" in text
    assert "tok.weight (shape (40, 32)" in text and "--model.init_replace [lm_head]" in text
    deeper = ArchConfig(vocab_size=40, d_model=32, n_layers=3, n_heads=4, max_seq_len=16)
    with pytest.raises(ConfigError, match=r"stack.blocks.2.attn.qkv.weight \(missing\)"):
        load_weights(GPT(deeper), read_weights(tmp_path / "w.pt"))
    with pytest.raises(ConfigError, match="'lm_haed' is no module of GPT"):
        load_weights(GPT(other_vocab), read_weights(tmp_path / "w.pt"), replace=("lm_haed",))

    target = GPT(other_vocab)
    fresh_head = target.lm_head.weight.detach().clone()
    load_weights(target, read_weights(tmp_path / "w.pt"), replace=("lm_head",))  # tied: tok goes with it
    assert torch.equal(target.stack.blocks[1].ffn.down.weight, source.stack.blocks[1].ffn.down.weight)
    assert torch.equal(target.lm_head.weight, fresh_head)
    set_trainable(target, PeftConfig(method="lora"), replace=("lm_head",))
    assert "tok.weight" in {n for n, p in target.named_parameters() if p.requires_grad}  # the new head trains


def test_init_from_a_reference_model_folder(tmp_path):
    """A transformers model saved with `save_pretrained` is converted by `from_reference`."""
    from models.interop import to_reference

    torch.manual_seed(0)
    source = GPT(ArchConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, max_seq_len=16, pos_encoding="learned"))
    to_reference(source).save_pretrained(tmp_path / "ref")
    target = GPT(source.cfg)
    load_weights(target, read_weights(tmp_path / "ref"))
    x = torch.randint(0, 40, (2, 16))
    torch.testing.assert_close(target.eval()(x), source.eval()(x))


def test_int8_dynamic_quantization_of_a_lora_model():
    model = _gpt(method="lora").eval()
    x = torch.randint(0, CFG.vocab_size, (2, 16))
    with torch.no_grad():
        expected = model(x)
        quantized = quantize_model(model, "int8")
        got = quantized(x)
    assert not any(type(m) is nn.Linear for m in quantized.modules())  # every Linear, LoRA's merged first
    assert sum(isinstance(m, torch.ao.nn.quantized.dynamic.Linear) for m in quantized.modules()) == 9
    assert (got - expected).abs().max() < 0.1 * expected.abs().max()
    with pytest.raises(ConfigError, match="runs on CPU only"):
        quantize_model(_gpt(), "int8", device="meta")
