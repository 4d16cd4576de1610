"""transformers' BertForMaskedLM <-> BertMLM (Post-Norm, learned positions, an embedding norm, GELU).

The suite model has no token types: every token is type 0, so BERT's token-type embedding of
type 0, a constant added at every position, is folded into the learned position table. Exported,
the position table is BERT's and its token-type table is zero: every type is the suite's type 0.
"""

from __future__ import annotations

from torch import nn

from ..bert import BertMLM
from ..config import ArchConfig
from .reference_config import hf_activation, hf_activation_name, renamed, unsupported
from .targets import Target, heads_shared_by_all
from .weight_table import Pair, Ref, Transform, block, export, load, module, shared, stacked, tensor

REFERENCE = "BertForMaskedLM"
# ArchConfig field -> BertConfig field, for the fields that only change name
FIELDS = {
    "vocab_size": "vocab_size",
    "d_model": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "max_seq_len": "max_position_embeddings",
    "dropout": "hidden_dropout_prob",
    "norm_eps": "layer_norm_eps",
}
TOKEN_TYPES = 2  # an exported model's type_vocab_size: BERT's, so sentence-pair inputs still run

# (position table, token-type table) <-> position table + type 0's row
FOLDED_TOKEN_TYPE = Transform(
    lambda positions, types: positions + types[0],
    lambda positions: (positions, positions.new_zeros(TOKEN_TYPES, positions.shape[1])),
)
# the head's bias is `decoder.bias`, tied to `predictions.bias` (with untied embeddings a separate copy
# that the forward never reads): the suite's bias is the first, and goes to both
HEAD_BIAS = Transform(lambda used, _: used, lambda bias: (bias, bias))


def table(cfg: ArchConfig) -> list[Pair]:
    d = cfg.d_model
    emb = "bert.embeddings"
    pairs = tensor("tok.weight", f"{emb}.word_embeddings.weight")
    pairs.append(
        Pair(
            "stack.pos.table.weight",
            (f"{emb}.position_embeddings.weight", f"{emb}.token_type_embeddings.weight"),
            FOLDED_TOKEN_TYPE,
        )
    )
    pairs += module("stack.embed_norm", f"{emb}.LayerNorm")
    for i in range(cfg.n_layers):
        layer = f"bert.encoder.layer.{i}"
        attn = f"{layer}.attention"
        pairs += block(
            f"stack.blocks.{i}",
            attn_norm=f"{attn}.output.LayerNorm",
            qkv=Ref((f"{attn}.self.query", f"{attn}.self.key", f"{attn}.self.value"), stacked(d, d, d)),
            out=f"{attn}.output.dense",
            ffn_norm=f"{layer}.output.LayerNorm",
            up=f"{layer}.intermediate.dense",
            down=f"{layer}.output.dense",
        )
    head = "cls.predictions"
    return (
        pairs
        + module("head_dense", f"{head}.transform.dense")
        + module("head_norm", f"{head}.transform.LayerNorm")
        + tensor("lm_head.weight", f"{head}.decoder.weight")
        + [Pair("lm_head.bias", (f"{head}.decoder.bias", f"{head}.bias"), HEAD_BIAS)]
    )


def convert(ref: nn.Module) -> BertMLM:
    c = ref.config
    unsupported(c.is_decoder or c.add_cross_attention, "a BERT decoder")
    position_type = getattr(c, "position_embedding_type", "absolute")  # gone in transformers 5
    unsupported(position_type != "absolute", f"BERT position_embedding_type={position_type!r}")
    gelu = hf_activation(c.hidden_act)
    unsupported(gelu["activation"] != "gelu", f"BERT hidden_act={c.hidden_act!r} (the MLM head is GELU)")
    cfg = ArchConfig(
        **renamed(c, FIELDS, to_suite=True),
        d_ff=c.intermediate_size,
        pos_encoding="learned",
        norm="layernorm",
        norm_placement="post",
        **gelu,
        embedding_norm=True,
        tie_embeddings=shared(ref.cls.predictions.decoder.weight, ref.bert.embeddings.word_embeddings.weight),
    )
    return load(BertMLM(cfg), ref, table(cfg))


def to_bert(model: BertMLM) -> nn.Module:
    """The BertForMaskedLM equivalent to `model` (settings checked by `TARGET`)."""
    from transformers import BertConfig, BertForMaskedLM

    cfg = model.cfg
    config = BertConfig(
        **renamed(cfg, FIELDS, to_suite=False),
        intermediate_size=cfg.ffn_dim,
        hidden_act=hf_activation_name(cfg),
        attention_probs_dropout_prob=cfg.dropout,
        type_vocab_size=TOKEN_TYPES,
        tie_word_embeddings=cfg.tie_embeddings,
    )
    return export(BertForMaskedLM(config), model, table(cfg))


TARGET = Target(
    library="transformers BertForMaskedLM",
    suite=BertMLM,
    settings={
        "pos_encoding": ("learned",),
        "learned_pos_offset": (0,),
        "norm": ("layernorm",),
        "norm_placement": ("post",),
        "activation": ("gelu",),  # BERT's MLM head uses the blocks' activation; the suite's is GELU
        "n_kv_heads": heads_shared_by_all,
        "embedding_norm": (True,),
        "scale_embeddings": (None, False),
        "attn_scale": (None,),
    },
    export=to_bert,
)
