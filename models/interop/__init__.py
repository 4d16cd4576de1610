"""Suite models from reference implementations and back: `from_reference(module)` copies a reference's
weights into the equivalent suite model, `to_reference(model)` a suite model's into the equivalent
reference.

Supported references (Hugging Face transformers and timm), one module each:
  GPT2LMHeadModel (`gpt2`), LlamaForCausalLM (`llama`), BloomForCausalLM (`bloom`),
  Qwen3ForCausalLM (`qwen3`), Olmo2ForCausalLM (`olmo2`), Gemma2ForCausalLM (`gemma2`) <-> GPT
  BertForMaskedLM (`bert`)                                                        <-> BertMLM
  T5ForConditionalGeneration (`t5`), MarianMTModel (`marian`),
  BartForConditionalGeneration (`bart`)                                           <-> EncoderDecoder
  timm VisionTransformer (`timm_vit`)                                             <-> ViT

Converters are registered by the reference's class name, so neither library is imported here.
Each reads the reference's config (and modules, for timm) and builds an `ArchConfig`. Exporters
are registered by the suite settings each reference can express (`Target`): a suite model exports
to the reference of its class whose settings it matches. Both directions move the weights through
one table per family (`table`: suite key, reference keys, transform both ways), so a mapping is
written once; architectural differences are absorbed by those transforms, each described in its
family's module. What every family shares: `weight_table` (tables and the transfer), `targets`
(`Target`) and `reference_config` (config fields, activation names).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..base import TransformerModel
from ..config import plugin_settings
from ..parametrization_fold import plan, to_standard
from . import bart, bert, bloom, gemma2, gpt2, llama, marian, olmo2, qwen3, t5, timm_vit
from .targets import Target

Converter = Callable[[nn.Module], TransformerModel]
FAMILIES = (gpt2, llama, qwen3, olmo2, gemma2, bloom, bert, t5, marian, bart, timm_vit)

# reference class name -> converter; each family module names the class it converts
CONVERTERS: dict[str, Converter] = {family.REFERENCE: family.convert for family in FAMILIES}

# the references a suite model can export to, each with the settings it can express
TARGETS: tuple[Target, ...] = tuple(family.TARGET for family in FAMILIES)


def from_reference(module: nn.Module) -> TransformerModel:
    """The suite model equivalent to `module`, with its weights, in eval mode, on its device/dtype.

    Raises TypeError for an unsupported class and ValueError for a supported class configured with
    a feature the suite models do not have (the message names it).
    """
    name = type(module).__name__
    if name not in CONVERTERS:
        raise TypeError(f"cannot convert {name}; supported reference classes: {', '.join(sorted(CONVERTERS))}")
    with torch.no_grad():
        return CONVERTERS[name](module)


def to_reference(model: TransformerModel) -> nn.Module:
    """The transformers / timm model equivalent to the suite `model`, with its weights, in eval mode,
    on its device/dtype. Imports the reference's library (transformers or timm).

    A µP or CompleteP model exports as the `sp` model computing its function, its multipliers folded into
    the weights (`models.parametrization_fold`); a readout multiplier unties a tied head, which a reference
    without an untied head refuses, saying so.

    Raises TypeError for a model no reference family has, and ValueError naming every setting that
    has no equivalent when no reference of the model's class matches its settings (each reference's
    mismatches, the closest reference first).
    """
    variants = plugin_settings(getattr(model, "cfg", None))
    if variants:
        raise ValueError(f"cannot export: {'; '.join(variants)} has no equivalent in any reference family")
    targets = [target for target in TARGETS if type(model) is target.suite]
    if not targets:
        names = sorted({target.suite.__name__ for target in TARGETS})
        raise TypeError(f"cannot export {type(model).__name__}; exportable suite models: {', '.join(names)}")
    reasons = {}
    if model.cfg.parametrization != "sp":  # no reference has µP's multipliers: they fold into the weights
        reasons = plan(model).reasons
        with torch.no_grad():
            model = to_standard(model)
    found = [(target, target.mismatches(model, reasons)) for target in targets]
    for target, mismatches in found:
        if not mismatches:
            with torch.no_grad():
                return target.export(model)
    phrases = [phrase for _, mismatches in sorted(found, key=lambda f: len(f[1])) for phrase in mismatches]
    raise ValueError(
        "cannot export: "
        + "; ".join(phrases)
        + f"; change these settings to those of one reference to export a {type(model).__name__}"
    )
