"""A reference config's fields as `ArchConfig` fields and back: the fields that only change name,
an encoder-decoder's depths, transformers' activation names, the special ids left unknown, and the
error for a reference feature the suite lacks."""

from __future__ import annotations

from ..config import ArchConfig

# a transformers decoder config's special ids: the suite's vocabulary is the data's, so they are unknown
# here (the defaults would name ids of another vocabulary); the export command sets them from the run
UNKNOWN_TOKEN_IDS = dict(bos_token_id=None, eos_token_id=None)

# transformers' ACT2FN names of GELU -> our `gelu_approximate` (all tanh variants are one formula)
HF_GELU = {
    "gelu": "none",
    "gelu_python": "none",
    "gelu_new": "tanh",
    "gelu_fast": "tanh",
    "gelu_accurate": "tanh",
    "gelu_pytorch_tanh": "tanh",
    "gelu_python_tanh": "tanh",
}
# the other way, the ACT2FN name computing exactly our function (torch's own GELU kernels)
HF_GELU_NAMES = {"none": "gelu", "tanh": "gelu_pytorch_tanh"}
assert all(HF_GELU[name] == approximate for approximate, name in HF_GELU_NAMES.items())


def hf_activation(name: str, gated: bool = False) -> dict:
    """A transformers activation name -> ArchConfig's `activation` and `gelu_approximate`."""
    if name in HF_GELU:
        return dict(activation="geglu" if gated else "gelu", gelu_approximate=HF_GELU[name])
    if name == "relu" and not gated:
        return dict(activation="relu")
    if name in ("silu", "swish"):
        return dict(activation="swiglu" if gated else "silu")
    kind = "gated " if gated else ""
    raise ValueError(
        f"cannot convert: {kind}activation {name!r} has no suite equivalent (relu, gelu, silu, swiglu, geglu)"
    )


def hf_activation_name(cfg: ArchConfig) -> str:
    """ArchConfig's `activation` -> the transformers name of its (gate) activation; the inverse of
    `hf_activation`."""
    if cfg.activation in ("gelu", "geglu"):
        return HF_GELU_NAMES[cfg.gelu_approximate]
    return {"relu": "relu", "silu": "silu", "swiglu": "silu"}[cfg.activation]


def renamed(config, names: dict[str, str], to_suite: bool) -> dict:
    """The config fields that only change name between the two sides: `names` maps an `ArchConfig`
    field to the reference config's; read from the reference config (`to_suite`) or the `ArchConfig`."""
    if to_suite:
        return {ours: getattr(config, theirs) for ours, theirs in names.items()}
    return {theirs: getattr(config, ours) for ours, theirs in names.items()}


def own_head_dim(head_dim: int, d_model: int, n_heads: int) -> int | None:
    """A reference's head width as `ArchConfig.head_dim`: `None` where it is d_model / n_heads (the config then
    reads as one without the field), else the width itself (Qwen 3's and Gemma 2's released models)."""
    return None if head_dim * n_heads == d_model else head_dim


def stack_depths(encoder: int, decoder: int) -> dict:
    """An encoder-decoder reference's depths as ArchConfig fields: `n_layers` is the encoder's, and
    `n_decoder_layers` is set only where the decoder's differs (so a symmetric model reads as before)."""
    return dict(n_layers=encoder, n_decoder_layers=None if decoder == encoder else decoder)


def unsupported(condition: bool, what: str) -> None:
    """Raises the converters' ValueError naming `what` when `condition` holds."""
    if condition:
        raise ValueError(f"cannot convert: {what} has no equivalent in the suite models")
