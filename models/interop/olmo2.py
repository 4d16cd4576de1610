"""transformers' Olmo2ForCausalLM <-> GPT: Llama's layout with OLMo 2's reordered norms, x + norm(f(x))
(`norm_placement: reordered`; its `post_attention_layernorm` and `post_feedforward_layernorm` are the Block's
`attn_norm` and `ffn_norm`), and RMSNorm over the whole query and key projections (`qk_norm: rmsnorm`,
`qk_norm_scope: projection`), before RoPE."""

from __future__ import annotations

from . import llama

REFERENCE = "Olmo2ForCausalLM"
NORMS = {
    "attn_norm": "post_attention_layernorm",
    "ffn_norm": "post_feedforward_layernorm",
    "q_norm": "self_attn.q_norm",
    "k_norm": "self_attn.k_norm",
}
convert, TARGET = llama.descendant(
    REFERENCE, NORMS, {"norm_placement": "reordered", "qk_norm": "rmsnorm", "qk_norm_scope": "projection"}
)
