"""transformers' LlamaForCausalLM <-> GPT (RoPE, RMSNorm, SwiGLU or GeGLU, GQA), and what Llama's
descendants share with it (`qwen3`, `olmo2`): the same projections and layer names, other norms.

Separate q/k/v projections are stacked into the fused `qkv` rows (q heads, k heads, v heads), and
the gated FFN's [gate; up] into `up`. RoPE's base and rotary width are read from the model itself.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..config import ArchConfig
from ..gpt import GPT
from .reference_config import (
    UNKNOWN_TOKEN_IDS,
    hf_activation,
    hf_activation_name,
    own_head_dim,
    renamed,
    unsupported,
)
from .targets import Target, any_head_dim, heads_dividing_d_model
from .weight_table import (
    IDENTITY,
    Pair,
    Ref,
    Transform,
    block,
    export,
    load,
    module,
    nonzero,
    shared,
    stacked,
    tensor,
)

REFERENCE = "LlamaForCausalLM"
# ArchConfig field -> LlamaConfig field, for the fields that only change name
FIELDS = {
    "vocab_size": "vocab_size",
    "d_model": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "dropout": "attention_dropout",
    "norm_eps": "rms_norm_eps",
}


# the Block's norms -> a layer's modules (under `model.layers.<i>.`), per model of Llama's layout
NORMS = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}


def table(cfg: ArchConfig, norms: dict[str, str] = NORMS, norm_weight: Transform = IDENTITY) -> list[Pair]:
    """`norm_weight`: how a reference norm's weight becomes the suite's (Gemma's 1 + w)."""
    q_rows, kv_rows, ffn = cfg.n_heads * cfg.d_head, cfg.kv_heads * cfg.d_head, cfg.ffn_dim
    pairs = tensor("tok.weight", "model.embed_tokens.weight")
    for i in range(cfg.n_layers):
        layer = f"model.layers.{i}"
        attn, mlp = f"{layer}.self_attn", f"{layer}.mlp"
        pairs += block(
            f"stack.blocks.{i}",
            qkv=Ref((f"{attn}.q_proj", f"{attn}.k_proj", f"{attn}.v_proj"), stacked(q_rows, kv_rows, kv_rows)),
            out=f"{attn}.o_proj",
            up=Ref((f"{mlp}.gate_proj", f"{mlp}.up_proj"), stacked(ffn, ffn)),
            down=f"{mlp}.down_proj",
            **{name: Ref((f"{layer}.{ref}",), norm_weight) for name, ref in norms.items()},
        )
    final_norm = module("stack.final_norm", Ref(("model.norm",), norm_weight))
    return pairs + final_norm + tensor("lm_head.weight", "lm_head.weight")


def _rope(ref: nn.Module, head_dim: int) -> dict:
    """rope_base and rope_fraction of a Llama. The rotary width is read from the model's own
    inverse frequencies: Llama's default RoPE rotates the full head (it ignores a config's
    partial_rotary_factor), and this follows whatever the reference actually computes."""
    c = ref.config
    params = getattr(c, "rope_parameters", None) or {"rope_theta": c.rope_theta}  # transformers 4.x
    rope_type = params.get("rope_type", params.get("type", "default"))
    unsupported(rope_type != "default", f"RoPE scaling {rope_type!r}")
    rotary = ref.model.rotary_emb
    unsupported(getattr(rotary, "attention_scaling", 1.0) != 1.0, "RoPE attention scaling")
    rotary_dim = 2 * rotary.inv_freq.numel()
    cfg_rope = dict(rope_base=float(params["rope_theta"]), rope_fraction=rotary_dim / head_dim)
    expected = 1.0 / cfg_rope["rope_base"] ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)
    unsupported(
        not torch.allclose(rotary.inv_freq.float().cpu(), expected, rtol=1e-5), "these RoPE inverse frequencies"
    )
    return cfg_rope


def convert_like(ref: nn.Module, norms: dict[str, str] = NORMS, **arch) -> GPT:
    """A GPT from a model of Llama's layout whose layers have the modules `norms` names; `arch`: the
    settings where it differs from Llama's (norm placement, QK-norm)."""
    c = ref.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    cfg = ArchConfig(
        **renamed(c, FIELDS, to_suite=True),
        head_dim=own_head_dim(head_dim, c.hidden_size, c.num_attention_heads),
        d_ff=c.intermediate_size,
        max_seq_len=c.max_position_embeddings,
        pos_encoding="rope",
        norm="rmsnorm",
        **{"norm_placement": "pre"} | arch,
        **hf_activation(c.hidden_act, gated=True),
        **_rope(ref, head_dim),
        bias=c.attention_bias or getattr(c, "mlp_bias", False),
        tie_embeddings=shared(ref.lm_head.weight, ref.model.embed_tokens.weight),
    )
    return load(GPT(cfg), ref, table(cfg, norms))


def convert(ref: nn.Module) -> GPT:
    return convert_like(ref)


def export_like(model: GPT, reference: str, norms: dict[str, str] = NORMS, mlp_bias: bool = True) -> nn.Module:
    """The transformers model `reference` (of Llama's layout, e.g. "LlamaForCausalLM") equivalent to `model`
    (settings checked by its `TARGET`). The bias flags are set where the suite's biases are non-zero (a zero
    bias is no bias); `mlp_bias`: the reference's config has the flag. Attention dropout only: the suite's
    other dropouts change training, not the outputs."""
    import transformers

    cfg = model.cfg
    model_class = getattr(transformers, reference)
    lengths = {"max_position_embeddings": cfg.max_seq_len} if cfg.max_seq_len else {}  # RoPE runs at any length
    biases = {"mlp_bias": nonzero(model, "ffn.up.bias", "ffn.down.bias")} if mlp_bias else {}
    config = model_class.config_class(
        **renamed(cfg, FIELDS, to_suite=False),  # n_kv_heads None: the default, one per head
        intermediate_size=cfg.ffn_dim,
        head_dim=cfg.d_head,
        hidden_act=hf_activation_name(cfg),
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_base},
        attention_bias=nonzero(model, "attn.qkv.bias", "attn.out.bias"),
        tie_word_embeddings=cfg.tie_embeddings,
        **biases,
        **UNKNOWN_TOKEN_IDS,
        **lengths,
    )
    return export(model_class(config), model, table(cfg, norms))


def to_llama(model: GPT) -> nn.Module:
    return export_like(model, REFERENCE)


SETTINGS = {
    "pos_encoding": ("rope",),
    "rope_fraction": (1.0,),  # Llama's default RoPE rotates the whole head
    "norm": ("rmsnorm",),
    "norm_placement": ("pre",),
    "activation": ("swiglu", "geglu"),
    "embedding_norm": (False,),
    "scale_embeddings": (None, False),
    "attn_scale": (None,),
    "head_dim": any_head_dim,
}
# LlamaConfig refuses heads that do not divide hidden_size, even with a head_dim of their own
TARGET = Target(
    library="transformers LlamaForCausalLM",
    suite=GPT,
    settings=SETTINGS | {"n_heads": heads_dividing_d_model},
    export=to_llama,
)


def descendant(reference: str, norms: dict[str, str], arch: dict) -> tuple[Callable[[nn.Module], GPT], Target]:
    """The converter and export target of a model of Llama's layout (`reference`, e.g. "Qwen3ForCausalLM")
    whose layers hold the norms `norms` names and whose settings differ from Llama's by `arch`; no biases
    (its MLP has no flag for them)."""

    def convert(ref: nn.Module) -> GPT:
        return convert_like(ref, norms, **arch)

    def to_reference(model: GPT) -> nn.Module:
        return export_like(model, reference, norms, mlp_bias=False)

    settings = SETTINGS | {name: (value,) for name, value in arch.items()} | {"bias": (False,)}
    return convert, Target(library=f"transformers {reference}", suite=GPT, settings=settings, export=to_reference)
