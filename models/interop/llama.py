"""transformers' LlamaForCausalLM -> GPT (RoPE, RMSNorm, SwiGLU, GQA).

Separate q/k/v projections are stacked into the fused `qkv` rows (q heads, k heads, v heads), and
the gated FFN's [gate; up] into `up`. RoPE's base and rotary width are read from the model itself.
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ArchConfig
from ..gpt import GPT
from .common import State, cat_wb, hf_activation, load, put_block, shared, unsupported, wb

REFERENCE = "LlamaForCausalLM"


def _rope(ref: nn.Module, head_dim: int) -> dict:
    """rope_base and rope_fraction of a Llama. The rotary width is read from the model's own
    inverse frequencies: Llama's default RoPE rotates the full head (it ignores a config's
    partial_rotary_factor), and this follows whatever the reference actually computes."""
    c = ref.config
    params = getattr(c, "rope_parameters", None) or {"rope_theta": c.rope_theta}  # transformers 4.x
    rope_type = params.get("rope_type", params.get("type", "default"))
    unsupported(rope_type != "default", f"RoPE scaling {rope_type!r}")
    rotary = ref.model.rotary_emb
    unsupported(getattr(rotary, "attention_scaling", 1.0) != 1.0, "RoPE attention scaling")
    rotary_dim = 2 * rotary.inv_freq.numel()
    cfg_rope = dict(rope_base=float(params["rope_theta"]), rope_fraction=rotary_dim / head_dim)
    expected = 1.0 / cfg_rope["rope_base"] ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)
    unsupported(
        not torch.allclose(rotary.inv_freq.float().cpu(), expected, rtol=1e-5), "these RoPE inverse frequencies"
    )
    return cfg_rope


def convert(ref: nn.Module) -> GPT:
    c, body = ref.config, ref.model
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    unsupported(head_dim * c.num_attention_heads != c.hidden_size, f"head_dim={head_dim} != hidden_size/heads")
    cfg = ArchConfig(
        vocab_size=c.vocab_size,
        d_model=c.hidden_size,
        n_layers=c.num_hidden_layers,
        n_heads=c.num_attention_heads,
        n_kv_heads=c.num_key_value_heads,
        d_ff=c.intermediate_size,
        max_seq_len=c.max_position_embeddings,
        pos_encoding="rope",
        norm="rmsnorm",
        norm_placement="pre",
        **hf_activation(c.hidden_act, gated=True),
        **_rope(ref, head_dim),
        dropout=c.attention_dropout,
        bias=c.attention_bias or c.mlp_bias,
        norm_eps=c.rms_norm_eps,
        tie_embeddings=shared(ref.lm_head.weight, body.embed_tokens.weight),
    )
    state = State(cfg.bias)
    state["tok.weight"] = body.embed_tokens.weight
    for i, layer in enumerate(body.layers):
        attn, mlp = layer.self_attn, layer.mlp
        put_block(
            state,
            f"stack.blocks.{i}",
            attn_norm=layer.input_layernorm,
            qkv=cat_wb(attn.q_proj, attn.k_proj, attn.v_proj),
            out=wb(attn.o_proj),
            ffn_norm=layer.post_attention_layernorm,
            up=cat_wb(mlp.gate_proj, mlp.up_proj),
            down=wb(mlp.down_proj),
        )
    state.norm("stack.final_norm", body.norm)
    state["lm_head.weight"] = ref.lm_head.weight
    return load(GPT(cfg), state, ref)
