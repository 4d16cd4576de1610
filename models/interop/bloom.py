"""transformers' BloomForCausalLM -> GPT (ALiBi, an embedding LayerNorm).

BLOOM's fused query_key_value projection is interleaved per head, (heads, 3, head_dim): its rows
are permuted into our (3, heads, head_dim). BLOOM's ALiBi adds slope·key_position, ours
-slope·|query - key|: per query row they differ by a constant, which softmax ignores.
"""

from __future__ import annotations

from torch import Tensor, nn

from ..config import ArchConfig
from ..gpt import GPT
from .common import State, load, put_block, shared, unsupported, wb

REFERENCE = "BloomForCausalLM"


def convert(ref: nn.Module) -> GPT:
    c, body = ref.config, ref.transformer
    unsupported(c.apply_residual_connection_post_layernorm, "BLOOM apply_residual_connection_post_layernorm")
    d, heads = c.hidden_size, c.n_head
    head_dim = d // heads
    cfg = ArchConfig(
        vocab_size=c.vocab_size,
        d_model=d,
        n_layers=c.n_layer,
        n_heads=heads,
        d_ff=4 * d,
        pos_encoding="alibi",
        norm="layernorm",
        norm_placement="pre",
        activation="gelu",
        gelu_approximate="tanh",  # bloom_gelu_forward is the tanh approximation
        dropout=c.hidden_dropout,
        norm_eps=c.layer_norm_epsilon,
        embedding_norm=True,
        tie_embeddings=shared(ref.lm_head.weight, body.word_embeddings.weight),
    )

    def deinterleave(m: nn.Linear) -> tuple[Tensor, Tensor]:  # rows (heads, 3, hd) -> (3, heads, hd)
        w = m.weight.view(heads, 3, head_dim, d).transpose(0, 1).reshape(3 * d, d)
        return w, m.bias.view(heads, 3, head_dim).transpose(0, 1).reshape(3 * d)

    state = State(cfg.bias)
    state["tok.weight"] = body.word_embeddings.weight
    state.norm("stack.embed_norm", body.word_embeddings_layernorm)
    for i, layer in enumerate(body.h):
        put_block(
            state,
            f"stack.blocks.{i}",
            attn_norm=layer.input_layernorm,
            qkv=deinterleave(layer.self_attention.query_key_value),
            out=wb(layer.self_attention.dense),
            ffn_norm=layer.post_attention_layernorm,
            up=wb(layer.mlp.dense_h_to_4h),
            down=wb(layer.mlp.dense_4h_to_h),
        )
    state.norm("stack.final_norm", body.ln_f)
    state["lm_head.weight"] = ref.lm_head.weight
    return load(GPT(cfg), state, ref)
