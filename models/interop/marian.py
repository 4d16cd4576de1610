"""transformers' MarianMTModel <-> EncoderDecoder: the original Transformer (Vaswani et al. 2017) as
Marian trains it: Post-Norm, sinusoidal positions, embeddings scaled by sqrt(d_model), biases.

Marian's layers are BART's (`bart.layers`, `bart.head`, `bart.arch_fields`). Its sinusoidal tables
hold all sines, then all cosines (`sinusoidal_layout="halves"`); they are buffers the suite computes,
so converting checks them and exporting writes them. Only source and target sharing one vocabulary
and embedding (`share_encoder_decoder_embeddings`, Marian's default) have a suite equivalent.
"""

from __future__ import annotations

from torch import nn

from ..config import ArchConfig
from ..encoder_decoder import EncoderDecoder
from ..positional import sinusoidal_table
from . import bart
from .reference_config import unsupported
from .targets import Target
from .weight_table import Computed, Pair, export, load

REFERENCE = "MarianMTModel"
LAYOUT = "halves"  # MarianSinusoidalPositionalEmbedding: sines in the first half, cosines in the second


def table(cfg: ArchConfig) -> list[Pair | Computed]:
    def positions(rows: int):
        return sinusoidal_table(rows, cfg.d_model, cfg.sinusoidal_layout)

    what = f"the sinusoidal table (sinusoidal_layout={cfg.sinusoidal_layout!r})"
    computed = [Computed(f"model.{stack}.embed_positions.weight", positions, what) for stack in ("encoder", "decoder")]
    return bart.head() + computed + bart.layers(cfg)


def convert(ref: nn.Module) -> EncoderDecoder:
    c = ref.config
    unsupported(
        not c.share_encoder_decoder_embeddings or c.decoder_vocab_size != c.vocab_size,
        f"Marian with separate source and target vocabularies (share_encoder_decoder_embeddings="
        f"{c.share_encoder_decoder_embeddings}, vocab_size={c.vocab_size}, decoder_vocab_size={c.decoder_vocab_size})",
    )
    cfg = ArchConfig(
        **bart.arch_fields(ref, "Marian"), pos_encoding="sinusoidal", sinusoidal_layout=LAYOUT, embedding_norm=False
    )
    return load(EncoderDecoder(cfg), ref, table(cfg))


def to_marian(model: EncoderDecoder) -> nn.Module:
    """The MarianMTModel equivalent to `model` (settings checked by `TARGET`); without biases, zero ones."""
    from transformers import MarianConfig, MarianMTModel

    bart.needs_max_seq_len(model.cfg, TARGET.library)
    fields = bart.config_fields(model.cfg) | dict(decoder_start_token_id=0)  # MarianConfig needs an id
    config = MarianConfig(**fields, share_encoder_decoder_embeddings=True)
    return export(MarianMTModel(config), model, table(model.cfg))


TARGET = Target(
    library="transformers MarianMTModel",
    suite=EncoderDecoder,
    settings={
        "pos_encoding": ("sinusoidal",),
        "sinusoidal_layout": (LAYOUT,),
        "embedding_norm": (False,),
        **bart.SETTINGS,
    },
    export=to_marian,
)
