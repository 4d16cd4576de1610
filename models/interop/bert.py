"""transformers' BertForMaskedLM -> BertMLM (Post-Norm, learned positions, an embedding norm).

The suite model has no token types: every token is type 0, so BERT's token-type embedding of
type 0, a constant added at every position, is folded into the learned position table.
"""

from __future__ import annotations

from torch import nn

from ..bert import BertMLM
from ..config import ArchConfig
from .common import State, cat_wb, hf_activation, load, put_block, shared, unsupported, wb

REFERENCE = "BertForMaskedLM"


def convert(ref: nn.Module) -> BertMLM:
    c, body, head = ref.config, ref.bert, ref.cls.predictions
    unsupported(c.is_decoder or c.add_cross_attention, "a BERT decoder")
    position_type = getattr(c, "position_embedding_type", "absolute")  # gone in transformers 5
    unsupported(position_type != "absolute", f"BERT position_embedding_type={position_type!r}")
    gelu = hf_activation(c.hidden_act)
    unsupported(gelu["activation"] != "gelu", f"BERT hidden_act={c.hidden_act!r} (the MLM head is GELU)")
    emb = body.embeddings
    cfg = ArchConfig(
        vocab_size=c.vocab_size,
        d_model=c.hidden_size,
        n_layers=c.num_hidden_layers,
        n_heads=c.num_attention_heads,
        d_ff=c.intermediate_size,
        max_seq_len=c.max_position_embeddings,
        pos_encoding="learned",
        norm="layernorm",
        norm_placement="post",
        **gelu,
        dropout=c.hidden_dropout_prob,
        norm_eps=c.layer_norm_eps,
        embedding_norm=True,
        tie_embeddings=shared(head.decoder.weight, emb.word_embeddings.weight),
    )
    state = State(cfg.bias)
    state["tok.weight"] = emb.word_embeddings.weight
    # our model has no token types: every token is type 0, a constant added at every position
    state["stack.pos.table.weight"] = emb.position_embeddings.weight + emb.token_type_embeddings.weight[0]
    state.norm("stack.embed_norm", emb.LayerNorm)
    for i, layer in enumerate(body.encoder.layer):
        attn = layer.attention
        put_block(
            state,
            f"stack.blocks.{i}",
            attn_norm=attn.output.LayerNorm,
            qkv=cat_wb(attn.self.query, attn.self.key, attn.self.value),
            out=wb(attn.output.dense),
            ffn_norm=layer.output.LayerNorm,
            up=wb(layer.intermediate.dense),
            down=wb(layer.output.dense),
        )
    state.linear("head_dense", *wb(head.transform.dense))
    state.norm("head_norm", head.transform.LayerNorm)
    state["lm_head.weight"], state["lm_head.bias"] = head.decoder.weight, head.decoder.bias
    return load(BertMLM(cfg), state, ref)
