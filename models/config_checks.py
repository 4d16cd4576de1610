"""`ArchConfig`'s checks (`models.config`): a value outside its `Literal`, and the cross-field rules, each a
`ConfigError` that names the fix. Torch-free, like the config."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, get_args

from contract.errors import ConfigError

if TYPE_CHECKING:
    from .config import ArchConfig


def choices(literal) -> str:
    return ", ".join(repr(c) for c in get_args(literal))


def divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def check(cfg: ArchConfig, literals: Iterable[tuple[str, object]]) -> None:
    """Raises ConfigError for the first invalid setting of `cfg`; `literals`: (field, its `Literal` type)."""
    for name, literal in literals:
        value = getattr(cfg, name)
        if value not in get_args(literal):
            raise ConfigError(f"{name}={value!r} is not valid; choose one of {choices(literal)}")
    _sizes(cfg)
    _heads(cfg)
    _positions(cfg)
    for name in ("attn_softcap", "logit_softcap"):
        if getattr(cfg, name) is not None and getattr(cfg, name) <= 0:
            raise ConfigError(f"{name}={getattr(cfg, name)} must be positive or null (Gemma 2: 50 and 30)")
    if not 0.0 <= cfg.dropout < 1.0:
        raise ConfigError(f"dropout={cfg.dropout} must be in [0, 1)")
    if not 0.0 <= cfg.drop_path < 1.0:
        raise ConfigError(f"drop_path={cfg.drop_path} must be in [0, 1) (DeiT-S uses 0.1)")
    if not isinstance(cfg.activation_checkpointing, bool):  # a truthy string would switch it on silently
        raise ConfigError(
            f"activation_checkpointing={cfg.activation_checkpointing!r} is not valid; choose one of True, False"
        )


def _sizes(cfg: ArchConfig) -> None:
    # None: max_seq_len is taken from the data, a stack depth is n_layers, the heads' width d_model / n_heads
    optional = ("max_seq_len", "n_encoder_layers", "n_decoder_layers", "base_width", "base_depth", "head_dim")
    set_sizes = tuple(name for name in optional if getattr(cfg, name) is not None)
    for name in ("vocab_size", "d_model", "n_layers", "n_heads", "ffn_multiple_of", *set_sizes):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{name}={getattr(cfg, name)} must be a positive integer")
    for name, needs in (("base_width", ("mup", "completep")), ("base_depth", ("completep",))):
        if getattr(cfg, name) is not None and cfg.parametrization not in needs:
            raise ConfigError(
                f"{name}={getattr(cfg, name)} has no effect under parametrization={cfg.parametrization!r}; "
                f"set parametrization to {' or '.join(map(repr, needs))}, or drop {name}"
            )
    if cfg.learned_pos_offset < 0:
        raise ConfigError(f"learned_pos_offset={cfg.learned_pos_offset} must be 0 or more (BART uses 2)")


def _heads(cfg: ArchConfig) -> None:
    if cfg.head_dim is None and cfg.d_model % cfg.n_heads:  # a head width of its own needs no divisibility
        raise ConfigError(
            f"d_model={cfg.d_model} is not divisible by n_heads={cfg.n_heads}; "
            f"choose n_heads among {divisors(cfg.d_model)}"
        )
    if cfg.n_heads % cfg.kv_heads:
        raise ConfigError(
            f"n_heads={cfg.n_heads} is not divisible by n_kv_heads={cfg.n_kv_heads}; "
            f"choose n_kv_heads among {divisors(cfg.n_heads)}"
        )


def _positions(cfg: ArchConfig) -> None:
    if not 0.0 < cfg.rope_fraction <= 1.0:
        raise ConfigError(f"rope_fraction={cfg.rope_fraction} must be in (0, 1]")
    if cfg.pos_encoding == "rope" and cfg.rotary_dim % 2:
        raise ConfigError(
            f"pos_encoding='rope' needs an even rotary dim, got head_dim*rope_fraction="
            f"{cfg.rotary_dim}; change d_model, n_heads{', head_dim' if cfg.head_dim else ''} or rope_fraction"
        )
    if cfg.rope_layers is not None:
        depth = max(cfg.n_layers, cfg.encoder_layers, cfg.decoder_layers)
        if cfg.pos_encoding != "rope":
            raise ConfigError(f"rope_layers={cfg.rope_layers} needs pos_encoding='rope', not {cfg.pos_encoding!r}")
        if any(not 0 <= layer < depth for layer in cfg.rope_layers):
            raise ConfigError(f"rope_layers={cfg.rope_layers}: layers are 0..{depth - 1} (0-based)")
    if cfg.pos_encoding == "t5" and not (cfg.t5_num_buckets >= 4 and cfg.t5_max_distance > cfg.t5_num_buckets // 2):
        # distances below num_buckets/2 get a bucket each; the log-spaced rest needs room up to
        # max_distance (log(max_distance / max_exact) > 0), or the buckets are garbage indices
        raise ConfigError(
            f"t5_num_buckets={cfg.t5_num_buckets}, t5_max_distance={cfg.t5_max_distance}: T5 needs "
            f"t5_num_buckets >= 4 and t5_max_distance > t5_num_buckets // 2 ({cfg.t5_num_buckets // 2}), "
            "e.g. T5's 32 and 128"
        )
