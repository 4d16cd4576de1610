"""Released shapes: a head width apart from hidden_size / heads (`ArchConfig.head_dim`), as Qwen3-0.6B (d 1,024,
16 heads of 128: wider than d / heads) and gemma-2-2b (d 2,304, 8 heads of 256: narrower) have it, and Llama, OLMo 2
and T5 (`d_kv`) can. Both directions at small sizes: reference -> suite within 1e-4 (the parity tests' tolerance),
padding included; suite -> reference within 1e-5, saved and reloaded the library's own way; round trips give equal
tensors; references whose heads split d_model refuse such a model, saying so."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")

from models import GPT, ArchConfig, BertMLM, EncoderDecoder  # noqa: E402
from models.interop import from_reference, to_reference  # noqa: E402
from tests.models.interop_cases import TOL, _ids, _max_diff, _perturb  # noqa: E402
from tests.models.interop_export_cases import (  # noqa: E402
    BERT_BASE,
    ENC_DEC_BASE,
    GPT_BASE,
    MARIAN_BASE,
    VOCAB,
    _assert_same_outputs,
)
from tests.models.interop_export_cases import TOL as EXPORT_TOL  # noqa: E402

WIDE = dict(
    vocab_size=90,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
)  # fmt: skip  (4 heads of 32 over d 64: Qwen3-0.6B's 2x)
TOKENS = dict(pad_token_id=0, bos_token_id=0, eos_token_id=0)
# name: (config class, model class, config)
DECODERS = {
    "qwen3-wide_heads-untied": (
        transformers.Qwen3Config,
        transformers.Qwen3ForCausalLM,
        dict(WIDE, tie_word_embeddings=False),
    ),
    "gemma2-narrow_heads": (  # 4 heads of 16 over d 72, scaled by head_dim^-½ as the released models are
        transformers.Gemma2Config,
        transformers.Gemma2ForCausalLM,
        dict(
            WIDE,
            hidden_size=72,
            head_dim=16,
            query_pre_attn_scalar=16,
            attn_logit_softcapping=3.0,
            final_logit_softcapping=20.0,
            max_position_embeddings=32,
            sliding_window=32,
            **TOKENS,
        ),
    ),  # fmt: skip
    "gemma2-wide_heads-mha": (
        transformers.Gemma2Config,
        transformers.Gemma2ForCausalLM,
        dict(
            WIDE,
            num_key_value_heads=4,
            query_pre_attn_scalar=24,
            max_position_embeddings=32,
            sliding_window=32,
            **TOKENS,
        ),
    ),  # fmt: skip
    "llama-wide_heads": (transformers.LlamaConfig, transformers.LlamaForCausalLM, WIDE),
    "olmo2-wide_heads": (transformers.Olmo2Config, transformers.Olmo2ForCausalLM, dict(WIDE, **TOKENS)),
}
T5_WIDE = dict(vocab_size=VOCAB, d_model=32, d_kv=16, num_heads=4, d_ff=64, num_layers=2, num_decoder_layers=1)


def _decoder(case: str) -> nn.Module:
    config_cls, model_cls, kwargs = DECODERS[case]
    torch.manual_seed(0)
    return _perturb(model_cls(config_cls(attn_implementation="eager", **kwargs)), seed=1)


def _t5() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.T5Config(dropout_rate=0.0, attn_implementation="eager", **T5_WIDE)
    return _perturb(transformers.T5ForConditionalGeneration(config), seed=1)


@pytest.mark.parametrize("case", list(DECODERS))
def test_released_head_width_converts_with_parity(case):
    """Refused before (`head_dim=… != hidden_size/heads`): now the suite model has the reference's head width, its
    logits within 1e-4 on a right-padded batch, and exports back to the reference's class with equal tensors."""
    ref = _decoder(case)
    model = from_reference(ref)
    c = ref.config
    assert c.head_dim * c.num_attention_heads != c.hidden_size  # the shape the refusal was about
    assert model.cfg.head_dim == c.head_dim and model.stack.blocks[0].attn.out.in_features == c.head_dim * 4
    ids = _ids(c.vocab_size, batch=3, length=17, seed=2)
    mask = torch.ones_like(ids)
    mask[1, 12:], mask[2, 5:] = 0, 0
    real = mask.bool()
    back = to_reference(model)
    assert type(back) is type(ref) and back.config.head_dim == c.head_dim
    with torch.no_grad():
        ours = model(ids)
        assert _max_diff(ours, ref(ids).logits) < TOL
        assert _max_diff(ours[real], ref(ids, attention_mask=mask).logits[real]) < TOL
        assert _max_diff(ours, back(ids).logits) < EXPORT_TOL
    theirs, again = ref.state_dict(), back.state_dict()
    assert theirs.keys() == again.keys()
    atol = 1e-7 if case.startswith("gemma2") else 0.0  # Gemma's norms store w for 1 + w: (w + 1) - 1 rounds
    for key in theirs:
        torch.testing.assert_close(again[key], theirs[key], rtol=0, atol=atol)


def test_t5_d_kv_apart_from_d_model_converts_with_parity():
    """T5's d_kv (t5-3b: 32 heads of 128 over d_model 1,024) is the suite's head_dim, padded source included."""
    ref = _t5()
    model = from_reference(ref)
    assert model.cfg.head_dim == 16 and model.decoder.blocks[0].cross.q.out_features == 64
    back = to_reference(model)
    assert back.config.d_kv == 16
    assert all(torch.equal(v, ref.state_dict()[k]) for k, v in back.state_dict().items())
    _assert_same_outputs(ref, model, VOCAB, other=back)


# ------------------------------------------------------------------------------------------------
# suite -> reference

ROPE_GPT = dict(GPT_BASE, pos_encoding="rope", norm="rmsnorm", activation="swiglu", n_kv_heads=2, bias=False)
SUITE_CASES = {  # name: (config, expected reference class); GPT_BASE is d 48 with 4 heads
    "qwen3-head_dim24": (dict(ROPE_GPT, qk_norm="rmsnorm", qk_norm_scope="head", head_dim=24), "Qwen3ForCausalLM"),
    "llama-head_dim8-untied": (dict(ROPE_GPT, head_dim=8, tie_embeddings=False), "LlamaForCausalLM"),
    "olmo2-head_dim20": (
        dict(ROPE_GPT, norm_placement="reordered", qk_norm="rmsnorm", head_dim=20),
        "Olmo2ForCausalLM",
    ),
    "qwen3-head_dim32-5heads": (  # d_model 48 is not divisible by 5 heads, which head_dim allows (Qwen3Config too)
        dict(ROPE_GPT, n_heads=5, n_kv_heads=None, qk_norm="rmsnorm", qk_norm_scope="head", head_dim=32),
        "Qwen3ForCausalLM",
    ),
    "gemma2-head_dim32-6heads-gqa": (
        dict(
            ROPE_GPT,
            n_heads=6,
            n_kv_heads=3,
            norm_placement="peri",
            activation="geglu",
            gelu_approximate="tanh",
            scale_embeddings=True,
            peri_embedding_norm=False,
            attn_softcap=5.0,
            logit_softcap=30.0,
            head_dim=32,
        ),
        "Gemma2ForCausalLM",
    ),  # fmt: skip
}


@pytest.mark.parametrize("case", list(SUITE_CASES))
def test_suite_model_with_a_head_width_exports_and_reloads(case, tmp_path):
    config, expected = SUITE_CASES[case]
    torch.manual_seed(0)
    suite = _perturb(GPT(ArchConfig(**config)), seed=1)
    ref = to_reference(suite)
    assert type(ref).__name__ == expected and ref.config.head_dim == config["head_dim"]
    ref.save_pretrained(tmp_path)
    loaded = getattr(transformers, expected).from_pretrained(tmp_path).eval()
    _assert_same_outputs(ref, suite, VOCAB, other=loaded)
    again = from_reference(loaded)
    assert again.cfg.head_dim == config["head_dim"]
    assert [k for k, v in suite.state_dict().items() if not torch.equal(v, again.state_dict()[k])] == []


def test_mup_model_with_a_head_width_exports_folded():
    """A µP model whose heads have their own width (kept at every width: µP's scale is SP's 1/√24 there) exports
    folded, computing the same."""
    torch.manual_seed(0)
    cfg = ArchConfig(**dict(ROPE_GPT, head_dim=24, tie_embeddings=False), parametrization="mup", base_width=24)
    suite = _perturb(GPT(cfg), seed=1)
    assert suite.stack.blocks[0].attn.scale == pytest.approx(24**-0.5)
    _assert_same_outputs(to_reference(suite), suite, VOCAB)


@pytest.mark.parametrize(
    "model, library",
    [
        (GPT(ArchConfig(**GPT_BASE, head_dim=16)), "transformers GPT2LMHeadModel"),
        (BertMLM(ArchConfig(**BERT_BASE, head_dim=16)), "transformers BertForMaskedLM"),
        (EncoderDecoder(ArchConfig(**MARIAN_BASE, head_dim=16)), "transformers MarianMTModel"),
    ],
    ids=["gpt2", "bert", "marian"],
)
def test_references_whose_heads_split_d_model_refuse_a_head_width(model, library):
    with pytest.raises(ValueError, match=rf"head_dim=16 has no equivalent in {library} \(it has None or (12|8)\)"):
        to_reference(model)


def test_llama_and_gemma2_refuse_heads_that_do_not_divide_d_model():
    """Their transformers configs check hidden_size % heads even with a head_dim; Qwen 3's and OLMo 2's do not."""
    llama = GPT(ArchConfig(**dict(ROPE_GPT, n_heads=5, n_kv_heads=None, head_dim=16)))
    with pytest.raises(
        ValueError, match=r"n_heads=5 has no equivalent in transformers LlamaForCausalLM \(it has 4 or 6\)"
    ):
        to_reference(llama)


def test_a_head_width_equal_to_the_split_exports_anywhere():
    """head_dim set to d_model / n_heads is the same model as unset: GPT-2 takes it."""
    torch.manual_seed(0)
    suite = _perturb(GPT(ArchConfig(**GPT_BASE, head_dim=12)), seed=1)
    ref = to_reference(suite)
    assert type(ref).__name__ == "GPT2LMHeadModel"
    _assert_same_outputs(ref, suite, VOCAB)


def test_t5_suite_model_with_a_head_width_exports():
    torch.manual_seed(0)
    suite = _perturb(EncoderDecoder(ArchConfig(**ENC_DEC_BASE, head_dim=4, activation="relu")), seed=1)
    ref = to_reference(suite)
    assert type(ref).__name__ == "T5ForConditionalGeneration" and ref.config.d_kv == 4
    _assert_same_outputs(ref, suite, VOCAB)


def test_a_released_shape_folder_loads_as_init_from(tmp_path):
    """What `--model.init_from FOLDER` does with a saved Gemma 2 of gemma-2-2b's kind of shape: the suite model built
    from the converted config takes the folder's weights strictly and computes the reference's logits; built without
    `head_dim` (d / heads), the load is refused with the attention's shapes named."""
    from models.finetune import load_weights, read_weights

    ref = _decoder("gemma2-narrow_heads")
    ref.save_pretrained(tmp_path / "gemma")
    cfg = from_reference(ref).cfg
    model = GPT(cfg)
    load_weights(model, read_weights(tmp_path / "gemma"), source="gemma")
    ids = _ids(cfg.vocab_size, batch=2, length=11, seed=5)
    with torch.no_grad():
        assert _max_diff(model.eval()(ids), ref(ids).logits) < TOL
    with pytest.raises(ValueError, match=r"stack.blocks.0.attn.out.weight \(shape \(72, 64\) in the file, \(72, 72\)"):
        load_weights(GPT(replace(cfg, head_dim=None, n_heads=4)), read_weights(tmp_path / "gemma"))
