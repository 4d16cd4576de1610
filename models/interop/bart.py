"""transformers' BartForConditionalGeneration <-> EncoderDecoder (Post-Norm, learned positions after
two unused rows, an embedding LayerNorm per stack, biases everywhere).

BART's learned position tables start at row 2 (a fairseq legacy): the suite's `learned_pos_offset`
keeps those rows, so the table moves whole. Its `final_logits_bias` is the suite's `output_bias`.
The suite has one token table for source and target: with a tied head it is `shared` (the encoder's
and decoder's `embed_tokens` are its aliases); untied, transformers 5 unties all three, and a model
converts only while they are equal.
Marian is a copy of BART's layers with sinusoidal positions: it shares this module's weight tables
(`layers`, `head`) and config mapping (`arch_fields`, `config_fields`). The suite has one head count
and FFN size for both stacks, so a reference whose encoder and decoder differ in them is refused;
depths may differ (`n_encoder_layers` / `n_decoder_layers`). Training-only settings (attention and
activation dropout, LayerDrop) are not read: the suite's one dropout is the reference's `dropout`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..config import ArchConfig
from ..encoder_decoder import EncoderDecoder
from .reference_config import UNKNOWN_TOKEN_IDS, hf_activation, hf_activation_name, renamed, stack_depths, unsupported
from .targets import Target, heads_shared_by_all
from .weight_table import Pair, Ref, Transform, block, export, load, module, shared, stacked, tensor

REFERENCE = "BartForConditionalGeneration"
# ArchConfig field -> BartConfig / MarianConfig field, for the fields that only change name
FIELDS = {
    "vocab_size": "vocab_size",
    "d_model": "d_model",
    "max_seq_len": "max_position_embeddings",
    "dropout": "dropout",
}
# ArchConfig field -> the reference's (encoder, decoder) fields: one suite value for both stacks
PER_STACK = {
    "n_heads": ("encoder_attention_heads", "decoder_attention_heads"),
    "d_ff": ("encoder_ffn_dim", "decoder_ffn_dim"),
}
NORM_EPS = 1e-5  # BART's and Marian's nn.LayerNorm default, not a config field
POSITION_OFFSET = 2  # BartLearnedPositionalEmbedding.offset
# the (1, vocab) `final_logits_bias` buffer <-> the head's (vocab,) bias
LOGITS_BIAS = Transform(lambda t: t[0], lambda t: (t[None],))
EMBEDDINGS = ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")


def _one_table(*tables: Tensor) -> Tensor:
    if not all(torch.equal(tables[0], t) for t in tables[1:]):
        raise ValueError(
            f"cannot convert: different tables in {', '.join(EMBEDDINGS[:-1])} and {EMBEDDINGS[-1]} "
            "(separate source and target embeddings) have no equivalent in the suite models, which have one "
            "token embedding"
        )
    return tables[0]


ONE_TABLE = Transform(_one_table, lambda t: (t,) * len(EMBEDDINGS))
# the reference's config when exporting: its special ids are the data's, set by the export command
# (the defaults name ids of another vocabulary, and a padding id past the vocabulary fails)
TOKEN_IDS = UNKNOWN_TOKEN_IDS | dict(pad_token_id=None, decoder_start_token_id=None, forced_eos_token_id=None)


def layers(cfg: ArchConfig) -> list[Pair]:
    """Every block of both stacks: BART's and Marian's layers have the same names."""
    d = cfg.d_model
    pairs = []
    for stack, depth in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        for i in range(depth):
            layer = f"model.{stack}.layers.{i}"
            attn, cross = f"{layer}.self_attn", {}
            if stack == "decoder":
                enc_dec = f"{layer}.encoder_attn"
                cross = dict(
                    cross_norm=f"{layer}.encoder_attn_layer_norm",
                    cross_q=f"{enc_dec}.q_proj",
                    cross_kv=Ref((f"{enc_dec}.k_proj", f"{enc_dec}.v_proj"), stacked(d, d)),
                    cross_out=f"{enc_dec}.out_proj",
                )
            pairs += block(
                f"{stack}.blocks.{i}",
                attn_norm=f"{layer}.self_attn_layer_norm",
                qkv=Ref((f"{attn}.q_proj", f"{attn}.k_proj", f"{attn}.v_proj"), stacked(d, d, d)),
                out=f"{attn}.out_proj",
                **cross,
                ffn_norm=f"{layer}.final_layer_norm",
                up=f"{layer}.fc1",
                down=f"{layer}.fc2",
            )
    return pairs


def head() -> list[Pair]:
    """The token embedding and the head."""
    return [
        Pair("tok.weight", EMBEDDINGS, ONE_TABLE),
        *tensor("lm_head.weight", "lm_head.weight"),
        Pair("lm_head.bias", ("final_logits_bias",), LOGITS_BIAS, optional=True),
    ]


def table(cfg: ArchConfig) -> list[Pair]:
    pairs = head()
    for stack in ("encoder", "decoder"):
        pairs += tensor(f"{stack}.pos.table.weight", f"model.{stack}.embed_positions.weight")
        pairs += module(f"{stack}.embed_norm", f"model.{stack}.layernorm_embedding")
    return pairs + layers(cfg)


def arch_fields(ref: nn.Module, family: str) -> dict:
    """The ArchConfig fields BART and Marian read alike from `ref` (refusing what the suite cannot hold)."""
    c = ref.config
    for ours, (enc, dec) in PER_STACK.items():
        unsupported(
            getattr(c, enc) != getattr(c, dec),
            f"{family} with {enc}={getattr(c, enc)} and {dec}={getattr(c, dec)} (the suite has one {ours})",
        )
    return dict(
        **renamed(c, FIELDS, to_suite=True),
        **stack_depths(c.encoder_layers, c.decoder_layers),
        n_heads=c.encoder_attention_heads,
        d_ff=c.encoder_ffn_dim,
        norm="layernorm",
        norm_placement="post",
        norm_eps=NORM_EPS,
        **hf_activation(c.activation_function),
        scale_embeddings=bool(c.scale_embedding),
        tie_embeddings=shared(ref.lm_head.weight, ref.model.shared.weight),
        output_bias=bool(ref.final_logits_bias.any()),
    )


def config_fields(cfg: ArchConfig) -> dict:
    """The BartConfig / MarianConfig fields of a suite config; the inverse of `arch_fields`."""
    return dict(
        **renamed(cfg, FIELDS, to_suite=False),
        encoder_layers=cfg.encoder_layers,
        decoder_layers=cfg.decoder_layers,
        encoder_attention_heads=cfg.n_heads,
        decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.ffn_dim,
        decoder_ffn_dim=cfg.ffn_dim,
        activation_function=hf_activation_name(cfg),
        attention_dropout=cfg.dropout,
        activation_dropout=cfg.dropout,
        scale_embedding=cfg.embed_scale != 1.0,
        tie_word_embeddings=cfg.tie_embeddings,
        **TOKEN_IDS,
    )


def needs_max_seq_len(cfg: ArchConfig, library: str) -> None:
    """Raises when `cfg` has no `max_seq_len`, the reference's `max_position_embeddings`."""
    if cfg.max_seq_len is None:
        raise ValueError(
            f"cannot export: max_seq_len=None has no equivalent in {library} (its max_position_embeddings "
            "sizes the position table); set max_seq_len"
        )


def convert(ref: nn.Module) -> EncoderDecoder:
    offset = ref.model.encoder.embed_positions.offset
    cfg = ArchConfig(**arch_fields(ref, "BART"), pos_encoding="learned", learned_pos_offset=offset, embedding_norm=True)
    return load(EncoderDecoder(cfg), ref, table(cfg))


def to_bart(model: EncoderDecoder) -> nn.Module:
    """The BartForConditionalGeneration equivalent to `model` (settings checked by `TARGET`). A suite
    model without biases gets zero biases: BART has them everywhere."""
    from transformers import BartConfig, BartForConditionalGeneration

    needs_max_seq_len(model.cfg, TARGET.library)
    config = BartConfig(**config_fields(model.cfg))
    return export(BartForConditionalGeneration(config), model, table(model.cfg))


# the settings both BART and Marian can express; each adds its positions
SETTINGS = {
    "norm": ("layernorm",),
    "norm_placement": ("post",),
    "norm_eps": (NORM_EPS,),
    "activation": ("relu", "gelu", "silu"),
    "n_kv_heads": heads_shared_by_all,
    "attn_scale": (None,),
}

TARGET = Target(
    library="transformers BartForConditionalGeneration",
    suite=EncoderDecoder,
    settings={
        "pos_encoding": ("learned",),
        "learned_pos_offset": (POSITION_OFFSET,),
        "embedding_norm": (True,),
        **SETTINGS,
    },
    export=to_bart,
)
