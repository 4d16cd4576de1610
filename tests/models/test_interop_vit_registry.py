"""Parity of `models.interop.from_reference` with timm's VisionTransformer (-> ViT), the converter registry,
and the references and settings it refuses; the cases in `interop_cases`."""

from __future__ import annotations

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")
timm_vit = pytest.importorskip("timm.models.vision_transformer")

from models.interop import CONVERTERS, from_reference  # noqa: E402
from tests.models.interop_cases import SMALL_GQA, TOL, _max_diff, _perturb  # noqa: E402
from tests.models.interop_vit_cases import VIT_CASES  # noqa: E402

# ------------------------------------------------------------------------------------------------
# timm VisionTransformer -> ViT


@pytest.mark.parametrize("case", list(VIT_CASES))
def test_vit_parity(case, max_diffs):
    kwargs, pool = VIT_CASES[case]
    torch.manual_seed(0)
    ref = _perturb(timm_vit.VisionTransformer(**kwargs), seed=1)
    model = from_reference(ref)
    assert not model.training and model.pool == pool
    images = torch.randn(3, kwargs.get("in_chans", 3), kwargs["img_size"], kwargs["img_size"])
    with torch.no_grad():
        diff = _max_diff(model(images), ref(images))
    max_diffs["vit"] = max(max_diffs.get("vit", 0.0), diff)
    assert diff < TOL


# ------------------------------------------------------------------------------------------------
# registry and refusals


def test_registry_covers_the_eleven_references():
    assert set(CONVERTERS) == {
        "GPT2LMHeadModel",
        "LlamaForCausalLM",
        "Qwen3ForCausalLM",
        "Olmo2ForCausalLM",
        "Gemma2ForCausalLM",
        "BloomForCausalLM",
        "BertForMaskedLM",
        "T5ForConditionalGeneration",
        "MarianMTModel",
        "BartForConditionalGeneration",
        "VisionTransformer",
    }


def test_one_module_per_reference_family():
    """models/interop/ holds a module per family (besides the shared `weight_table`, `targets` and
    `reference_config`), each registered under the reference class it converts."""
    import importlib
    import pkgutil

    import models.interop as interop

    shared = {"weight_table", "targets", "reference_config"}
    names = [m.name for m in pkgutil.iter_modules(interop.__path__) if m.name not in shared]
    families = [importlib.import_module(f"models.interop.{name}") for name in names]
    assert {family.REFERENCE: family.convert for family in families} == CONVERTERS


def test_unsupported_type_raises_type_error_listing_supported():
    with pytest.raises(TypeError, match="Linear.*supported.*GPT2LMHeadModel.*VisionTransformer"):
        from_reference(nn.Linear(4, 4))


def test_unsupported_features_raise_value_error():
    config = transformers.LlamaConfig(
        vocab_size=16,
        hidden_size=16,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
    )
    with pytest.raises(ValueError, match="RoPE scaling 'linear'"):
        from_reference(transformers.LlamaForCausalLM(config))
    vit = timm_vit.VisionTransformer(img_size=8, patch_size=4, embed_dim=16, depth=1, num_heads=2, global_pool="avg")
    with pytest.raises(ValueError, match="global_pool='avg' with class_token=True"):
        from_reference(vit)
    gemma = dict(SMALL_GQA, head_dim=8, max_position_embeddings=64, pad_token_id=0, bos_token_id=0, eos_token_id=0)
    with pytest.raises(ValueError, match=r"sliding-window attention \(a window of 16 < 64 positions\)"):
        from_reference(transformers.Gemma2ForCausalLM(transformers.Gemma2Config(**gemma, sliding_window=16)))
