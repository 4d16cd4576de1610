"""transformers' T5ForConditionalGeneration <-> EncoderDecoder (T5 relative bias, RMSNorm, no biases).

T5 (with `scale_decoder_outputs`, the original T5) scales the decoder output by d_model**-0.5
before the tied head: the suite model gets an untied head holding embedding * d_model**-0.5.
transformers 5 always ties T5's head to the embedding, so a suite model exports when its head is
tied, or is exactly that scaled embedding.
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import GATED_ACTIVATIONS, ArchConfig
from ..encoder_decoder import EncoderDecoder
from .reference_config import hf_activation, hf_activation_name, own_head_dim, renamed, stack_depths
from .targets import Target, any_head_dim, heads_shared_by_all
from .weight_table import IDENTITY, Pair, Ref, block, export, load, module, scaled, shared, stacked, tensor

REFERENCE = "T5ForConditionalGeneration"
# ArchConfig field -> T5Config field, for the fields that only change name
FIELDS = {
    "vocab_size": "vocab_size",
    "d_model": "d_model",
    "n_heads": "num_heads",
    "dropout": "dropout_rate",
    "t5_num_buckets": "relative_attention_num_buckets",
    "t5_max_distance": "relative_attention_max_distance",
    "norm_eps": "layer_norm_epsilon",
}


def table(cfg: ArchConfig, scale_outputs: bool) -> list[Pair]:
    d, inner, ffn = cfg.d_model, cfg.n_heads * cfg.d_head, cfg.ffn_dim  # inner: T5's num_heads·d_kv
    gated = cfg.activation in GATED_ACTIVATIONS
    pairs = tensor("tok.weight", "shared.weight")
    for stack, depth in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        # one bias table per stack, held by its first layer's self-attention
        pairs += tensor(
            f"{stack}.pos.bias.weight", f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        )
        for i in range(depth):
            layer = f"{stack}.block.{i}.layer"
            attn, ff = f"{layer}.0.SelfAttention", f"{layer}.{2 if stack == 'decoder' else 1}"
            dense = f"{ff}.DenseReluDense"
            cross = {}
            if stack == "decoder":
                enc_dec = f"{layer}.1.EncDecAttention"
                cross = dict(
                    cross_norm=f"{layer}.1.layer_norm",
                    cross_q=f"{enc_dec}.q",
                    cross_kv=Ref((f"{enc_dec}.k", f"{enc_dec}.v"), stacked(inner, inner)),
                    cross_out=f"{enc_dec}.o",
                )
            pairs += block(
                f"{stack}.blocks.{i}",
                attn_norm=f"{layer}.0.layer_norm",
                qkv=Ref((f"{attn}.q", f"{attn}.k", f"{attn}.v"), stacked(inner, inner, inner)),
                out=f"{attn}.o",
                **cross,
                ffn_norm=f"{ff}.layer_norm",
                up=Ref((f"{dense}.wi_0", f"{dense}.wi_1"), stacked(ffn, ffn)) if gated else f"{dense}.wi",
                down=f"{dense}.wo",
            )
        pairs += module(f"{stack}.final_norm", f"{stack}.final_layer_norm")
    return pairs + tensor("lm_head.weight", "lm_head.weight", scaled(d**-0.5) if scale_outputs else IDENTITY)


def convert(ref: nn.Module) -> EncoderDecoder:
    c = ref.config
    # transformers 5 always ties the head and keeps the scaling as `scale_decoder_outputs`;
    # 4.x scales exactly when the embeddings are tied
    scale_outputs = getattr(c, "scale_decoder_outputs", c.tie_word_embeddings)
    cfg = ArchConfig(
        **renamed(c, FIELDS, to_suite=True),
        head_dim=own_head_dim(c.d_kv, c.d_model, c.num_heads),  # t5-3b, t5-11b: d_kv 128 over d_model 1,024
        **stack_depths(c.num_layers, c.num_decoder_layers),
        d_ff=c.d_ff,
        pos_encoding="t5",
        norm="rmsnorm",  # T5LayerNorm: no mean, no bias
        norm_placement="pre",
        **hf_activation(c.dense_act_fn, gated=c.is_gated_act),
        bias=False,
        tie_embeddings=not scale_outputs and shared(ref.lm_head.weight, ref.shared.weight),
        attn_scale=1.0,
    )
    return load(EncoderDecoder(cfg), ref, table(cfg, scale_outputs))


def _feed_forward_proj(cfg: ArchConfig) -> str:
    """T5Config's `feed_forward_proj` of the suite's activation: `[gated-]<ACT2FN name>`."""
    name = hf_activation_name(cfg)
    if cfg.activation not in GATED_ACTIVATIONS:
        return name
    # T5Config reads "gated-gelu" as the tanh approximation (T5 v1.1); exact GELU has a second name
    return f"gated-{'gelu_python' if name == 'gelu' else name}"


def to_t5(model: EncoderDecoder) -> nn.Module:
    """The T5ForConditionalGeneration equivalent to `model` (settings checked by `TARGET`)."""
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = model.cfg
    scale_outputs = not cfg.tie_embeddings  # the original T5's scaled embedding (checked by `_head`)
    config = T5Config(
        **renamed(cfg, FIELDS, to_suite=False),
        num_layers=cfg.encoder_layers,
        num_decoder_layers=cfg.decoder_layers,
        d_kv=cfg.d_head,
        d_ff=cfg.ffn_dim,
        feed_forward_proj=_feed_forward_proj(cfg),
        tie_word_embeddings=scale_outputs,  # how T5Config is told to scale the decoder output
    )
    return export(T5ForConditionalGeneration(config), model, table(cfg, scale_outputs))


def _head(model: EncoderDecoder) -> dict[str, str]:
    """A tied head is v1.1's unscaled one; an untied one exports only as the original T5's scaled embedding,
    which is how `convert` made it (so the comparison is exact)."""
    if model.cfg.tie_embeddings or torch.equal(model.lm_head.weight, model.tok.weight * model.cfg.d_model**-0.5):
        return {}
    return {
        "tie_embeddings": "its output head is the token embedding, scaled by d_model**-0.5 in the original T5, and "
        "this model's lm_head is neither"
    }


TARGET = Target(
    library="transformers T5ForConditionalGeneration",
    suite=EncoderDecoder,
    settings={
        "pos_encoding": ("t5",),
        "norm": ("rmsnorm",),
        "norm_placement": ("pre",),
        "bias": (False,),
        "n_kv_heads": heads_shared_by_all,
        "embedding_norm": (False,),
        "scale_embeddings": (None, False),
        "attn_scale": (1.0,),  # T5 does not scale its scores
        "output_bias": (False,),
        "head_dim": any_head_dim,  # d_kv
    },
    export=to_t5,
    weights=_head,
)
