"""transformers' GPT2LMHeadModel <-> GPT (learned positions, LayerNorm, Pre-Norm, GELU or ReLU).

GPT-2's Conv1D computes x @ W + b with W stored (in, out): its weights are transposed into our
(out, in) linears. The fused `c_attn` rows are already (q, k, v).
"""

from __future__ import annotations

from torch import nn

from ..config import ArchConfig
from ..gpt import GPT
from .reference_config import UNKNOWN_TOKEN_IDS, hf_activation, hf_activation_name, renamed, unsupported
from .targets import Target, heads_shared_by_all
from .weight_table import IDENTITY, TRANSPOSED, Pair, Ref, block, export, load, module, shared, tensor

REFERENCE = "GPT2LMHeadModel"
# ArchConfig field -> GPT2Config field, for the fields that only change name
FIELDS = {
    "vocab_size": "vocab_size",
    "d_model": "n_embd",
    "n_layers": "n_layer",
    "n_heads": "n_head",
    "max_seq_len": "n_positions",
    "dropout": "resid_pdrop",
    "norm_eps": "layer_norm_epsilon",
}


def table(cfg: ArchConfig) -> list[Pair]:
    def conv1d(name: str) -> Ref:  # Conv1D computes x @ W + b with W (in, out)
        return Ref((name,), weight=TRANSPOSED, bias=IDENTITY)

    pairs = tensor("tok.weight", "transformer.wte.weight") + tensor("stack.pos.table.weight", "transformer.wpe.weight")
    for i in range(cfg.n_layers):
        h = f"transformer.h.{i}"
        pairs += block(
            f"stack.blocks.{i}",
            attn_norm=f"{h}.ln_1",
            qkv=conv1d(f"{h}.attn.c_attn"),
            out=conv1d(f"{h}.attn.c_proj"),
            ffn_norm=f"{h}.ln_2",
            up=conv1d(f"{h}.mlp.c_fc"),
            down=conv1d(f"{h}.mlp.c_proj"),
        )
    return pairs + module("stack.final_norm", "transformer.ln_f") + tensor("lm_head.weight", "lm_head.weight")


def convert(ref: nn.Module) -> GPT:
    c, body = ref.config, ref.transformer
    unsupported(c.scale_attn_by_inverse_layer_idx, "GPT-2 scale_attn_by_inverse_layer_idx")
    unsupported(c.add_cross_attention, "GPT-2 add_cross_attention")
    cfg = ArchConfig(
        **renamed(c, FIELDS, to_suite=True),
        d_ff=c.n_inner or 4 * c.n_embd,
        pos_encoding="learned",
        norm="layernorm",
        norm_placement="pre",
        **hf_activation(c.activation_function),
        tie_embeddings=shared(ref.lm_head.weight, body.wte.weight),
        attn_scale=None if c.scale_attn_weights else 1.0,
    )
    return load(GPT(cfg), ref, table(cfg))


def to_gpt2(model: GPT) -> nn.Module:
    """The GPT2LMHeadModel equivalent to `model` (settings checked by `TARGET`). A suite model without
    biases gets zero biases: GPT-2 has them everywhere."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = model.cfg
    config = GPT2Config(
        **renamed(cfg, FIELDS, to_suite=False),
        n_inner=cfg.ffn_dim,
        activation_function=hf_activation_name(cfg),
        embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.dropout,
        tie_word_embeddings=cfg.tie_embeddings,
        scale_attn_weights=cfg.attn_scale is None,
        **UNKNOWN_TOKEN_IDS,
    )
    return export(GPT2LMHeadModel(config), model, table(cfg))


TARGET = Target(
    library="transformers GPT2LMHeadModel",
    suite=GPT,
    settings={
        "pos_encoding": ("learned",),
        "learned_pos_offset": (0,),
        "norm": ("layernorm",),
        "norm_placement": ("pre",),
        "activation": ("gelu", "relu"),
        "n_kv_heads": heads_shared_by_all,
        "embedding_norm": (False,),
        "scale_embeddings": (None, False),
        "attn_scale": (None, 1.0),
    },
    export=to_gpt2,
)
