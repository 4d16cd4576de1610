"""transformers' T5ForConditionalGeneration -> EncoderDecoder (T5 relative bias, RMSNorm, no biases).

T5 (with `scale_decoder_outputs`, the original T5) scales the decoder output by d_model**-0.5
before the tied head: the suite model gets an untied head holding embedding * d_model**-0.5.
"""

from __future__ import annotations

from torch import nn

from ..config import ArchConfig
from ..encoder_decoder import EncoderDecoder
from .common import State, cat_wb, hf_activation, load, put_block, shared, unsupported, wb

REFERENCE = "T5ForConditionalGeneration"


def convert(ref: nn.Module) -> EncoderDecoder:
    c = ref.config
    unsupported(c.num_decoder_layers != c.num_layers, "T5 with num_decoder_layers != num_layers")
    unsupported(c.d_kv * c.num_heads != c.d_model, f"T5 d_kv={c.d_kv} != d_model/num_heads")
    # transformers 5 always ties the head and keeps the scaling as `scale_decoder_outputs`;
    # 4.x scales exactly when the embeddings are tied
    scale_outputs = getattr(c, "scale_decoder_outputs", c.tie_word_embeddings)
    cfg = ArchConfig(
        vocab_size=c.vocab_size,
        d_model=c.d_model,
        n_layers=c.num_layers,
        n_heads=c.num_heads,
        d_ff=c.d_ff,
        pos_encoding="t5",
        norm="rmsnorm",  # T5LayerNorm: no mean, no bias
        norm_placement="pre",
        **hf_activation(c.dense_act_fn, gated=c.is_gated_act),
        dropout=c.dropout_rate,
        t5_num_buckets=c.relative_attention_num_buckets,
        t5_max_distance=c.relative_attention_max_distance,
        bias=False,
        norm_eps=c.layer_norm_epsilon,
        tie_embeddings=not scale_outputs and shared(ref.lm_head.weight, ref.shared.weight),
        attn_scale=1.0,
    )
    state = State(cfg.bias)
    state["tok.weight"] = ref.shared.weight

    def ffn(layer_ff: nn.Module) -> dict:
        dense = layer_ff.DenseReluDense
        up = cat_wb(dense.wi_0, dense.wi_1) if c.is_gated_act else wb(dense.wi)
        return dict(ffn_norm=layer_ff.layer_norm, up=up, down=wb(dense.wo))

    for name, stack in (("encoder", ref.encoder), ("decoder", ref.decoder)):
        # one bias table per stack, held by its first layer's self-attention
        state[f"{name}.pos.bias.weight"] = stack.block[0].layer[0].SelfAttention.relative_attention_bias.weight
        for i, block in enumerate(stack.block):
            self_attn = block.layer[0].SelfAttention
            cross = None
            if name == "decoder":
                enc_dec = block.layer[1].EncDecAttention
                cross = (block.layer[1].layer_norm, wb(enc_dec.q), cat_wb(enc_dec.k, enc_dec.v), wb(enc_dec.o))
            put_block(
                state,
                f"{name}.blocks.{i}",
                attn_norm=block.layer[0].layer_norm,
                qkv=cat_wb(self_attn.q, self_attn.k, self_attn.v),
                out=wb(self_attn.o),
                cross=cross,
                **ffn(block.layer[-1]),
            )
        state.norm(f"{name}.final_norm", stack.final_layer_norm)
    lm_head = ref.lm_head.weight
    state["lm_head.weight"] = lm_head * c.d_model**-0.5 if scale_outputs else lm_head
    return load(EncoderDecoder(cfg), state, ref)
