"""transformers' Gemma2ForCausalLM <-> GPT: Llama's layout with Gemma 2's deviations, each supported or
refused by name.

Supported: sandwich norms (`norm_placement: peri`: input_layernorm / post_attention_layernorm around
attention, pre_ / post_feedforward_layernorm around the FFN), RMSNorm weights stored as w with the scale
1 + w (moved by `PLUS_ONE`), embeddings scaled by √d (`scale_embeddings`), scores scaled by
query_pre_attn_scalar^-½ (`attn_scale`), soft-capped attention scores and output logits (`attn_softcap`,
`logit_softcap`), GeGLU with tanh GELU, a head_dim other than hidden_size / heads (the released models':
`head_dim`). Refused: sliding-window layers whose window is shorter than the model's positions (the suite has
no sliding window; within the window a layer is plain causal attention).
"""

from __future__ import annotations

from torch import nn

from ..config import ArchConfig
from ..gpt import GPT
from . import llama
from .reference_config import (
    UNKNOWN_TOKEN_IDS,
    hf_activation,
    hf_activation_name,
    own_head_dim,
    renamed,
    unsupported,
)
from .targets import Target, heads_dividing_d_model
from .weight_table import Transform, export, load, nonzero, shared

REFERENCE = "Gemma2ForCausalLM"
NORMS = {
    "attn_norm": "input_layernorm",
    "attn_out_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "ffn_out_norm": "post_feedforward_layernorm",
}
PLUS_ONE = Transform(lambda w: w + 1, lambda w: (w - 1,))  # Gemma's RMSNorm scales by 1 + w


def _table(cfg: ArchConfig):
    return llama.table(cfg, NORMS, PLUS_ONE)


def convert(ref: nn.Module) -> GPT:
    c = ref.config
    head_dim = c.head_dim
    sliding = "sliding_attention" in (c.layer_types or []) and c.sliding_window < c.max_position_embeddings
    unsupported(sliding, f"sliding-window attention (a window of {c.sliding_window} < {c.max_position_embeddings} "
                         "positions)")  # fmt: skip
    cfg = ArchConfig(
        **renamed(c, llama.FIELDS, to_suite=True),
        head_dim=own_head_dim(head_dim, c.hidden_size, c.num_attention_heads),
        d_ff=c.intermediate_size,
        max_seq_len=c.max_position_embeddings,
        pos_encoding="rope",
        norm="rmsnorm",
        norm_placement="peri",
        **hf_activation(c.hidden_activation, gated=True),
        **llama._rope(ref, head_dim),
        bias=c.attention_bias,
        tie_embeddings=shared(ref.lm_head.weight, ref.model.embed_tokens.weight),
        scale_embeddings=True,
        peri_embedding_norm=False,  # Gemma 2 scales its embeddings instead of normalising them as Peri-LN does
        attn_scale=c.query_pre_attn_scalar**-0.5,
        attn_softcap=c.attn_logit_softcapping,
        logit_softcap=c.final_logit_softcapping,
    )
    return load(GPT(cfg), ref, _table(cfg))


def to_gemma2(model: GPT) -> nn.Module:
    """The Gemma2ForCausalLM equivalent to `model`: every layer full attention (no sliding window)."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    cfg = model.cfg
    scalar = cfg.d_head if cfg.attn_scale is None else round(cfg.attn_scale**-2)  # checked by TARGET
    config = Gemma2Config(
        # the key heads spelt out: Gemma2Config validates its fields and refuses None (MHA) as not an int
        **renamed(cfg, llama.FIELDS, to_suite=False) | {"num_key_value_heads": cfg.kv_heads},
        intermediate_size=cfg.ffn_dim,
        head_dim=cfg.d_head,
        hidden_activation=hf_activation_name(cfg),
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_base},
        attention_bias=nonzero(model, "attn.qkv.bias", "attn.out.bias"),
        query_pre_attn_scalar=scalar,
        attn_logit_softcapping=cfg.attn_softcap,
        final_logit_softcapping=cfg.logit_softcap,
        layer_types=["full_attention"] * cfg.n_layers,
        tie_word_embeddings=cfg.tie_embeddings,
        max_position_embeddings=cfg.max_seq_len or 8192,  # Gemma 2's; RoPE runs at any length
        **UNKNOWN_TOKEN_IDS,
    )
    return export(Gemma2ForCausalLM(config), model, _table(cfg))


def _any(name: str):
    return lambda cfg: (getattr(cfg, name),)


def _scales(cfg: ArchConfig) -> tuple:
    """Gemma 2 scales scores by query_pre_attn_scalar^-½ with an integer scalar: the default, or the scale of
    the integer nearest to `attn_scale`^-2."""
    return (None,) if cfg.attn_scale is None else (None, round(cfg.attn_scale**-2) ** -0.5)


TARGET = Target(
    library="transformers Gemma2ForCausalLM",
    suite=GPT,
    settings=llama.SETTINGS
    | {
        "norm_placement": ("peri",),
        "activation": ("geglu",),
        "gelu_approximate": ("tanh",),
        "scale_embeddings": (True,),
        "peri_embedding_norm": (False,),
        "attn_scale": _scales,
        "attn_softcap": _any("attn_softcap"),
        "logit_softcap": _any("logit_softcap"),
        "bias": (False,),
        "n_heads": heads_dividing_d_model,  # Gemma2Config refuses others, even with a head_dim of their own
    },
    export=to_gemma2,
)
