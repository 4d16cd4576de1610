"""transformers' GPT2LMHeadModel -> GPT.

GPT-2's Conv1D computes x @ W + b with W stored (in, out): its weights are transposed into our
(out, in) linears. The fused `c_attn` rows are already (q, k, v).
"""

from __future__ import annotations

from torch import Tensor, nn

from ..config import ArchConfig
from ..gpt import GPT
from .common import State, hf_activation, load, put_block, shared, unsupported

REFERENCE = "GPT2LMHeadModel"


def convert(ref: nn.Module) -> GPT:
    c, body = ref.config, ref.transformer
    unsupported(c.scale_attn_by_inverse_layer_idx, "GPT-2 scale_attn_by_inverse_layer_idx")
    unsupported(c.add_cross_attention, "GPT-2 add_cross_attention")
    cfg = ArchConfig(
        vocab_size=c.vocab_size,
        d_model=c.n_embd,
        n_layers=c.n_layer,
        n_heads=c.n_head,
        d_ff=c.n_inner or 4 * c.n_embd,
        max_seq_len=c.n_positions,
        pos_encoding="learned",
        norm="layernorm",
        norm_placement="pre",
        **hf_activation(c.activation_function),
        dropout=c.resid_pdrop,
        norm_eps=c.layer_norm_epsilon,
        tie_embeddings=shared(ref.lm_head.weight, body.wte.weight),
        attn_scale=None if c.scale_attn_weights else 1.0,
    )
    state = State(cfg.bias)
    state["tok.weight"] = body.wte.weight
    state["stack.pos.table.weight"] = body.wpe.weight

    def conv1d(m: nn.Module) -> tuple[Tensor, Tensor]:  # Conv1D computes x @ W + b with W (in, out)
        return m.weight.t(), m.bias

    for i, layer in enumerate(body.h):
        put_block(
            state,
            f"stack.blocks.{i}",
            attn_norm=layer.ln_1,
            qkv=conv1d(layer.attn.c_attn),
            out=conv1d(layer.attn.c_proj),
            ffn_norm=layer.ln_2,
            up=conv1d(layer.mlp.c_fc),
            down=conv1d(layer.mlp.c_proj),
        )
    state.norm("stack.final_norm", body.ln_f)
    state["lm_head.weight"] = ref.lm_head.weight
    return load(GPT(cfg), state, ref)
