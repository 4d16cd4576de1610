"""Suite models from reference implementations: `from_reference(module)` copies the weights.

Supported references (Hugging Face transformers and timm), one module each:
  GPT2LMHeadModel (`gpt2`), LlamaForCausalLM (`llama`), BloomForCausalLM (`bloom`) -> GPT
  BertForMaskedLM (`bert`)                                                        -> BertMLM
  T5ForConditionalGeneration (`t5`)                                               -> EncoderDecoder
  timm VisionTransformer (`timm_vit`)                                             -> ViT

Converters are registered by the reference's class name, so neither library is imported here.
Each reads the reference's config (and modules, for timm), builds an `ArchConfig`, fills the suite
model's state dict from the reference's tensors and loads it strictly, so a tensor that is missing,
left over or mis-shaped is an error, not a silent random init. Architectural differences are
absorbed by weight transformations, each described in its family's module; what every family
shares (the state dict under construction, one block's tensors, activation names) is in `common`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..base import TransformerModel
from . import bert, bloom, gpt2, llama, t5, timm_vit

Converter = Callable[[nn.Module], TransformerModel]

# reference class name -> converter; each family module names the class it converts
CONVERTERS: dict[str, Converter] = {
    family.REFERENCE: family.convert for family in (gpt2, llama, bloom, bert, t5, timm_vit)
}


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
