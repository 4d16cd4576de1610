"""Export of µP and CompleteP models: `to_reference` folds the multipliers into the weights
(`models.parametrization_fold`), so the transformers / timm model computes the suite model's logits within 1e-5; a
reference that cannot hold the folded model (T5's untied head) refuses in one line that says why."""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("timm")

from lit_modules.rebuilt_run import reference_model  # noqa: E402
from models import GPT, ArchConfig, BertMLM, EncoderDecoder, ViT  # noqa: E402
from models.interop import to_reference  # noqa: E402
from models.peft import PeftConfig, apply_peft  # noqa: E402
from tests.models.interop_cases import _perturb  # noqa: E402
from tests.models.interop_export_cases import (  # noqa: E402
    BART_BASE,
    BERT_BASE,
    ENC_DEC_BASE,
    GPT_BASE,
    MARIAN_BASE,
    VIT_BASE,
    VOCAB,
    _assert_same_outputs,
)

MUP = dict(parametrization="mup", base_width=16)  # m_N = 3 (GPT's d_model 48), 2 (the others' 32)
COMPLETEP = dict(parametrization="completep", base_width=16, base_depth=1)  # m_L = 2 (1 for a 1-block stack)
ROPE = dict(pos_encoding="rope", norm="rmsnorm", activation="swiglu", n_kv_heads=2)

CASES = {
    # name: (suite class, config, ViT arguments, expected reference class)
    "gpt2-mup-tied": (GPT, dict(GPT_BASE, **MUP), {}, "GPT2LMHeadModel"),
    "gpt2-completep-untied-relu": (
        GPT,
        dict(GPT_BASE, **COMPLETEP, activation="relu", tie_embeddings=False),
        {},
        "GPT2LMHeadModel",
    ),
    "llama-completep-gqa-tied": (GPT, dict(GPT_BASE, **COMPLETEP, **ROPE), {}, "LlamaForCausalLM"),
    "qwen3-mup-qknorm_per_head": (
        GPT,
        dict(GPT_BASE, **MUP, **ROPE, bias=False, qk_norm="rmsnorm", qk_norm_scope="head"),
        {},
        "Qwen3ForCausalLM",
    ),
    "olmo2-completep-reordered-qknorm": (
        GPT,
        dict(GPT_BASE, **COMPLETEP, **ROPE, bias=False, norm_placement="reordered", qk_norm="rmsnorm"),
        {},
        "Olmo2ForCausalLM",
    ),
    "gemma2-completep-sandwich-scaled-softcaps": (
        GPT,
        dict(
            GPT_BASE,
            **COMPLETEP,
            **dict(ROPE, activation="geglu"),
            gelu_approximate="tanh",
            norm_placement="peri",
            bias=False,
            scale_embeddings=True,
            peri_embedding_norm=False,
            attn_softcap=2.0,
            logit_softcap=3.0,
        ),
        {},
        "Gemma2ForCausalLM",
    ),
    "bloom-mup-tied": (
        GPT,
        dict(GPT_BASE, **MUP, pos_encoding="alibi", gelu_approximate="tanh", embedding_norm=True),
        {},
        "BloomForCausalLM",
    ),
    "bert-completep-tied": (BertMLM, dict(BERT_BASE, **COMPLETEP), {}, "BertForMaskedLM"),
    "t5-completep-base-width": (  # m_N = 1: the tied head stays tied; T5's explicit attn_scale: nothing to fold
        EncoderDecoder,
        dict(ENC_DEC_BASE, parametrization="completep", base_depth=1),
        {},
        "T5ForConditionalGeneration",
    ),
    "marian-completep-scaled-3-1": (
        EncoderDecoder,
        dict(MARIAN_BASE, **COMPLETEP, n_encoder_layers=3, n_decoder_layers=1, output_bias=True),
        {},
        "MarianMTModel",
    ),
    "bart-mup-scaled-tied": (
        EncoderDecoder,
        dict(BART_BASE, **MUP, scale_embeddings=True),
        {},
        "BartForConditionalGeneration",
    ),
    "vit-completep": (
        ViT,
        dict(VIT_BASE, **COMPLETEP),
        dict(image_size=8, patch_size=2, in_channels=3, num_classes=7, pool="cls"),
        "VisionTransformer",
    ),
}


def _suite(case: str) -> torch.nn.Module:
    model_cls, config, vit_args, _ = CASES[case]
    torch.manual_seed(0)
    return _perturb(model_cls(ArchConfig(**config), **vit_args), seed=1)


@pytest.mark.parametrize("case", list(CASES))
def test_a_mup_model_exports_with_its_multipliers_folded(case):
    suite = _suite(case)
    before = {key: value.clone() for key, value in suite.state_dict().items()}
    ref = to_reference(suite)
    assert type(ref).__name__ == CASES[case][3] and not ref.training
    _assert_same_outputs(ref, suite, VOCAB)
    assert all(torch.equal(before[key], value) for key, value in suite.state_dict().items())  # left as it was
    if suite.cfg.tie_embeddings and suite.cfg.base_width and not isinstance(suite, ViT):  # µP's readout: untied
        assert ref.config.tie_word_embeddings is False


def test_a_lora_run_of_a_mup_model_exports_merged_and_folded():
    """`cli.py export`'s path: LoRA merged into a copy, then the multipliers folded."""
    suite = _suite("llama-completep-gqa-tied")
    apply_peft(suite, PeftConfig(method="lora", targets=("q", "v", "ffn_out")))
    with torch.no_grad():
        for name, p in suite.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn_like(p) * 0.05)
    suite.eval()
    plain = copy.deepcopy(suite)
    _assert_same_outputs(reference_model(suite), suite, VOCAB)
    assert all(torch.equal(p, q) for p, q in zip(plain.parameters(), suite.parameters(), strict=True))


def test_a_tied_t5_under_mup_is_refused_in_one_line_saying_why():
    """The readout multiplier unties the head, which T5 has only as the token table scaled by d_model**-0.5."""
    suite = _perturb(EncoderDecoder(ArchConfig(**dict(ENC_DEC_BASE, **MUP))), seed=1)
    with pytest.raises(ValueError) as info:
        to_reference(suite)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "cannot export: tie_embeddings=False (parametrization='mup' multiplies the readout's input by 1/m_N = 0.5, "
        "folded into an lm_head untied from the token embedding) has no equivalent in transformers "
        "T5ForConditionalGeneration (its output head is the token embedding, scaled by d_model**-0.5 in the "
        "original T5, and this model's lm_head is neither); "
    )
