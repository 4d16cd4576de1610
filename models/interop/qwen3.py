"""transformers' Qwen3ForCausalLM <-> GPT: Llama's layout with RMSNorm on each head's query and key
(`qk_norm: rmsnorm`, `qk_norm_scope: head`), before RoPE. Sliding-window attention is refused."""

from __future__ import annotations

from torch import nn

from ..gpt import GPT
from . import llama
from .reference_config import unsupported

REFERENCE = "Qwen3ForCausalLM"
NORMS = llama.NORMS | {"q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"}
_convert, TARGET = llama.descendant(REFERENCE, NORMS, {"qk_norm": "rmsnorm", "qk_norm_scope": "head"})


def convert(ref: nn.Module) -> GPT:
    unsupported(getattr(ref.config, "use_sliding_window", False), "sliding-window attention")
    return _convert(ref)
