"""transformers' BloomForCausalLM <-> GPT (ALiBi, an embedding LayerNorm, GELU tanh, d_ff = 4·d).

BLOOM's fused query_key_value projection is interleaved per head, (heads, 3, head_dim): its rows
are permuted into our (3, heads, head_dim). BLOOM's ALiBi adds slope·key_position, ours
-slope·|query - key|: per query row they differ by a constant, which softmax ignores.
"""

from __future__ import annotations

from torch import Tensor, nn

from ..config import ArchConfig
from ..gpt import GPT
from .reference_config import UNKNOWN_TOKEN_IDS, renamed, unsupported
from .targets import Target, heads_shared_by_all
from .weight_table import Pair, Ref, Transform, block, export, load, module, shared, tensor

REFERENCE = "BloomForCausalLM"
# ArchConfig field -> BloomConfig field, for the fields that only change name
FIELDS = {
    "vocab_size": "vocab_size",
    "d_model": "hidden_size",
    "n_layers": "n_layer",
    "n_heads": "n_head",
    "dropout": "hidden_dropout",
    "norm_eps": "layer_norm_epsilon",
}


def _interleaved(heads: int) -> Transform:
    """Rows (heads, 3, head_dim) <-> (3, heads, head_dim), for the weight and the bias alike."""

    def permute(t: Tensor, outer: int, inner: int) -> Tensor:
        return t.reshape(outer, inner, -1, *t.shape[1:]).transpose(0, 1).reshape(t.shape)

    return Transform(lambda t: permute(t, heads, 3), lambda t: (permute(t, 3, heads),))


def table(cfg: ArchConfig) -> list[Pair]:
    qkv = _interleaved(cfg.n_heads)
    pairs = tensor("tok.weight", "transformer.word_embeddings.weight")
    pairs += module("stack.embed_norm", "transformer.word_embeddings_layernorm")
    for i in range(cfg.n_layers):
        h = f"transformer.h.{i}"
        pairs += block(
            f"stack.blocks.{i}",
            attn_norm=f"{h}.input_layernorm",
            qkv=Ref((f"{h}.self_attention.query_key_value",), qkv),
            out=f"{h}.self_attention.dense",
            ffn_norm=f"{h}.post_attention_layernorm",
            up=f"{h}.mlp.dense_h_to_4h",
            down=f"{h}.mlp.dense_4h_to_h",
        )
    return pairs + module("stack.final_norm", "transformer.ln_f") + tensor("lm_head.weight", "lm_head.weight")


def convert(ref: nn.Module) -> GPT:
    c = ref.config
    unsupported(c.apply_residual_connection_post_layernorm, "BLOOM apply_residual_connection_post_layernorm")
    cfg = ArchConfig(
        **renamed(c, FIELDS, to_suite=True),
        d_ff=4 * c.hidden_size,
        pos_encoding="alibi",
        norm="layernorm",
        norm_placement="pre",
        activation="gelu",
        gelu_approximate="tanh",  # bloom_gelu_forward is the tanh approximation
        embedding_norm=True,
        tie_embeddings=shared(ref.lm_head.weight, ref.transformer.word_embeddings.weight),
    )
    return load(GPT(cfg), ref, table(cfg))


def to_bloom(model: GPT) -> nn.Module:
    """The BloomForCausalLM equivalent to `model` (settings checked by `TARGET`). A suite model
    without biases gets zero biases: BLOOM has them everywhere."""
    from transformers import BloomConfig, BloomForCausalLM

    cfg = model.cfg
    config = BloomConfig(
        **renamed(cfg, FIELDS, to_suite=False),
        attention_dropout=cfg.dropout,
        tie_word_embeddings=cfg.tie_embeddings,
        **UNKNOWN_TOKEN_IDS,
    )
    return export(BloomForCausalLM(config), model, table(cfg))


TARGET = Target(
    library="transformers BloomForCausalLM",
    suite=GPT,
    settings={
        "pos_encoding": ("alibi",),
        "norm": ("layernorm",),
        "norm_placement": ("pre",),
        "activation": ("gelu",),
        "gelu_approximate": ("tanh",),  # bloom_gelu_forward
        "d_ff": lambda cfg: (None, 4 * cfg.d_model),  # BLOOM's MLP is 4·hidden_size wide
        "n_kv_heads": heads_shared_by_all,
        "embedding_norm": (True,),
        "scale_embeddings": (None, False),
        "attn_scale": (None,),
    },
    export=to_bloom,
)
