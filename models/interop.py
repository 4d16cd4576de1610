"""Suite models from reference implementations: `from_reference(module)` copies the weights.

Supported references (Hugging Face transformers and timm) and what they become:
  GPT2LMHeadModel, LlamaForCausalLM, BloomForCausalLM -> GPT
  BertForMaskedLM                                      -> BertMLM
  T5ForConditionalGeneration                           -> EncoderDecoder
  timm VisionTransformer                               -> ViT

Converters are registered by the reference's class name, so neither library is imported here.
Each reads the reference's config (and modules, for timm), builds an `ArchConfig`, fills the suite
model's state dict from the reference's tensors and loads it strictly, so a tensor that is missing,
left over or mis-shaped is an error, not a silent random init. Architectural differences are
absorbed by weight transformations:
  * GPT-2's Conv1D stores (in, out): transposed.
  * separate q/k/v projections are stacked into the fused `qkv` rows (q heads, k heads, v heads);
    BLOOM's fused projection is interleaved per head, (heads, 3, head_dim), and is permuted.
  * gated FFNs stack [gate; up] into `up`.
  * BERT's token-type embedding of type 0 is folded into the learned position table.
  * T5 (with `scale_decoder_outputs`, the original T5) scales the decoder output by d_model**-0.5
    before the tied head: the suite model gets an untied head holding embedding * d_model**-0.5.
  * BLOOM's ALiBi adds slope·key_position, ours -slope·|query - key|: per query row they differ by
    a constant, which softmax ignores.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from .base import TransformerModel
from .bert import BertMLM
from .config import ArchConfig
from .encoder_decoder import EncoderDecoder
from .gpt import GPT
from .vit import ViT

Converter = Callable[[nn.Module], TransformerModel]

# reference class name -> converter; filled by @_register below
CONVERTERS: dict[str, Converter] = {}


def _register(name: str) -> Callable[[Converter], Converter]:
    def add(convert: Converter) -> Converter:
        CONVERTERS[name] = convert
        return convert

    return add


def from_reference(module: nn.Module) -> TransformerModel:
    """The suite model equivalent to `module`, with its weights, in eval mode, on its device/dtype.

    Raises TypeError for an unsupported class and ValueError for a supported class configured with
    a feature the suite models do not have (the message names it).
    """
    name = type(module).__name__
    if name not in CONVERTERS:
        raise TypeError(f"cannot convert {name}; supported reference classes: {', '.join(sorted(CONVERTERS))}")
    with torch.no_grad():
        return CONVERTERS[name](module)


# ---------------------------------------------------------------------------------------------
# shared helpers


class _State(dict):
    """The suite model's state dict under construction. `bias` is the suite config's `bias`: block
    linears get the reference's bias, or zeros where the reference has none."""

    def __init__(self, bias: bool):
        super().__init__()
        self.bias = bias

    def linear(self, name: str, weight: Tensor, bias: Tensor | None = None) -> None:
        self[f"{name}.weight"] = weight
        if self.bias:
            self[f"{name}.bias"] = bias if bias is not None else weight.new_zeros(weight.shape[0])
        elif bias is not None:
            raise ValueError(f"{name}: the reference has a bias but the suite config has bias=False")

    def norm(self, name: str, module: nn.Module) -> None:
        self[f"{name}.weight"] = module.weight
        if getattr(module, "bias", None) is not None:
            self[f"{name}.bias"] = module.bias


def _wb(linear: nn.Module) -> tuple[Tensor, Tensor | None]:
    return linear.weight, linear.bias


def _cat_wb(*linears: nn.Module) -> tuple[Tensor, Tensor | None]:
    """Several nn.Linear stacked along the output rows (q;k;v or gate;up)."""
    weight = torch.cat([m.weight for m in linears])
    if all(m.bias is None for m in linears):
        return weight, None
    return weight, torch.cat([m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in linears])


def _put_block(state: _State, prefix: str, *, attn_norm, qkv, out, ffn_norm, up, down, cross=None) -> None:
    """One suite `Block`: norms are reference modules, projections (weight, bias) pairs; `cross`
    is (norm, q, kv, out) for a cross-attending block."""
    state.norm(f"{prefix}.attn_norm", attn_norm)
    state.linear(f"{prefix}.attn.qkv", *qkv)
    state.linear(f"{prefix}.attn.out", *out)
    if cross is not None:
        cross_norm, q, kv, cross_out = cross
        state.norm(f"{prefix}.cross_norm", cross_norm)
        state.linear(f"{prefix}.cross.q", *q)
        state.linear(f"{prefix}.cross.kv", *kv)
        state.linear(f"{prefix}.cross.out", *cross_out)
    state.norm(f"{prefix}.ffn_norm", ffn_norm)
    state.linear(f"{prefix}.ffn.up", *up)
    state.linear(f"{prefix}.ffn.down", *down)


def _shared(a: Tensor, b: Tensor) -> bool:
    """Tied weights: the same storage."""
    return a.shape == b.shape and a.data_ptr() == b.data_ptr()


def _load(model: TransformerModel, state: _State, reference: nn.Module) -> TransformerModel:
    if model.cfg.tie_embeddings and "lm_head.weight" in model.state_dict():
        state["lm_head.weight"] = state["tok.weight"]
    ref_param = next(reference.parameters())
    model.to(device=ref_param.device, dtype=ref_param.dtype)
    model.load_state_dict(state, strict=True)
    return model.eval()


# transformers' ACT2FN names of GELU -> our `gelu_approximate` (all tanh variants are one formula)
_HF_GELU = {
    "gelu": "none",
    "gelu_python": "none",
    "gelu_new": "tanh",
    "gelu_fast": "tanh",
    "gelu_accurate": "tanh",
    "gelu_pytorch_tanh": "tanh",
    "gelu_python_tanh": "tanh",
}


def _hf_activation(name: str, gated: bool = False) -> dict:
    """A transformers activation name -> ArchConfig's `activation` and `gelu_approximate`."""
    if name in _HF_GELU:
        return dict(activation="geglu" if gated else "gelu", gelu_approximate=_HF_GELU[name])
    if name == "relu" and not gated:
        return dict(activation="relu")
    if name in ("silu", "swish") and gated:
        return dict(activation="swiglu")
    kind = "gated " if gated else ""
    raise ValueError(f"{kind}activation {name!r} has no suite equivalent (relu, gelu, swiglu, geglu)")


def _unsupported(condition: bool, what: str) -> None:
    if condition:
        raise ValueError(f"cannot convert: {what} has no equivalent in the suite models")


# ---------------------------------------------------------------------------------------------
# decoders -> GPT


@_register("GPT2LMHeadModel")
def _gpt2(ref: nn.Module) -> GPT:
    c, body = ref.config, ref.transformer
    _unsupported(c.scale_attn_by_inverse_layer_idx, "GPT-2 scale_attn_by_inverse_layer_idx")
    _unsupported(c.add_cross_attention, "GPT-2 add_cross_attention")
    cfg = ArchConfig(
        vocab_size=c.vocab_size,
        d_model=c.n_embd,
        n_layers=c.n_layer,
        n_heads=c.n_head,
        d_ff=c.n_inner or 4 * c.n_embd,
        max_seq_len=c.n_positions,
        pos_encoding="learned",
        norm="layernorm",
        norm_placement="pre",
        **_hf_activation(c.activation_function),
        dropout=c.resid_pdrop,
        norm_eps=c.layer_norm_epsilon,
        tie_embeddings=_shared(ref.lm_head.weight, body.wte.weight),
        attn_scale=None if c.scale_attn_weights else 1.0,
    )
    state = _State(cfg.bias)
    state["tok.weight"] = body.wte.weight
    state["stack.pos.table.weight"] = body.wpe.weight

    def conv1d(m: nn.Module) -> tuple[Tensor, Tensor]:  # Conv1D computes x @ W + b with W (in, out)
        return m.weight.t(), m.bias

    for i, layer in enumerate(body.h):
        _put_block(
            state,
            f"stack.blocks.{i}",
            attn_norm=layer.ln_1,
            qkv=conv1d(layer.attn.c_attn),
            out=conv1d(layer.attn.c_proj),
            ffn_norm=layer.ln_2,
            up=conv1d(layer.mlp.c_fc),
            down=conv1d(layer.mlp.c_proj),
        )
    state.norm("stack.final_norm", body.ln_f)
    state["lm_head.weight"] = ref.lm_head.weight
    return _load(GPT(cfg), state, ref)


def _llama_rope(ref: nn.Module, head_dim: int) -> dict:
    """rope_base and rope_fraction of a Llama. The rotary width is read from the model's own
    inverse frequencies: Llama's default RoPE rotates the full head (it ignores a config's
    partial_rotary_factor), and this follows whatever the reference actually computes."""
    c = ref.config
    params = getattr(c, "rope_parameters", None) or {"rope_theta": c.rope_theta}  # transformers 4.x
    rope_type = params.get("rope_type", params.get("type", "default"))
    _unsupported(rope_type != "default", f"RoPE scaling {rope_type!r}")
    rotary = ref.model.rotary_emb
    _unsupported(getattr(rotary, "attention_scaling", 1.0) != 1.0, "RoPE attention scaling")
    rotary_dim = 2 * rotary.inv_freq.numel()
    cfg_rope = dict(rope_base=float(params["rope_theta"]), rope_fraction=rotary_dim / head_dim)
    expected = 1.0 / cfg_rope["rope_base"] ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)
    _unsupported(
        not torch.allclose(rotary.inv_freq.float().cpu(), expected, rtol=1e-5), "these RoPE inverse frequencies"
    )
    return cfg_rope


@_register("LlamaForCausalLM")
def _llama(ref: nn.Module) -> GPT:
    c, body = ref.config, ref.model
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    _unsupported(head_dim * c.num_attention_heads != c.hidden_size, f"head_dim={head_dim} != hidden_size/heads")
    cfg = ArchConfig(
        vocab_size=c.vocab_size,
        d_model=c.hidden_size,
        n_layers=c.num_hidden_layers,
        n_heads=c.num_attention_heads,
        n_kv_heads=c.num_key_value_heads,
        d_ff=c.intermediate_size,
        max_seq_len=c.max_position_embeddings,
        pos_encoding="rope",
        norm="rmsnorm",
        norm_placement="pre",
        **_hf_activation(c.hidden_act, gated=True),
        **_llama_rope(ref, head_dim),
        dropout=c.attention_dropout,
        bias=c.attention_bias or c.mlp_bias,
        norm_eps=c.rms_norm_eps,
        tie_embeddings=_shared(ref.lm_head.weight, body.embed_tokens.weight),
    )
    state = _State(cfg.bias)
    state["tok.weight"] = body.embed_tokens.weight
    for i, layer in enumerate(body.layers):
        attn, mlp = layer.self_attn, layer.mlp
        _put_block(
            state,
            f"stack.blocks.{i}",
            attn_norm=layer.input_layernorm,
            qkv=_cat_wb(attn.q_proj, attn.k_proj, attn.v_proj),
            out=_wb(attn.o_proj),
            ffn_norm=layer.post_attention_layernorm,
            up=_cat_wb(mlp.gate_proj, mlp.up_proj),
            down=_wb(mlp.down_proj),
        )
    state.norm("stack.final_norm", body.norm)
    state["lm_head.weight"] = ref.lm_head.weight
    return _load(GPT(cfg), state, ref)


@_register("BloomForCausalLM")
def _bloom(ref: nn.Module) -> GPT:
    c, body = ref.config, ref.transformer
    _unsupported(c.apply_residual_connection_post_layernorm, "BLOOM apply_residual_connection_post_layernorm")
    d, heads = c.hidden_size, c.n_head
    head_dim = d // heads
    cfg = ArchConfig(
        vocab_size=c.vocab_size,
        d_model=d,
        n_layers=c.n_layer,
        n_heads=heads,
        d_ff=4 * d,
        pos_encoding="alibi",
        norm="layernorm",
        norm_placement="pre",
        activation="gelu",
        gelu_approximate="tanh",  # bloom_gelu_forward is the tanh approximation
        dropout=c.hidden_dropout,
        norm_eps=c.layer_norm_epsilon,
        embedding_norm=True,
        tie_embeddings=_shared(ref.lm_head.weight, body.word_embeddings.weight),
    )

    def deinterleave(m: nn.Linear) -> tuple[Tensor, Tensor]:  # rows (heads, 3, hd) -> (3, heads, hd)
        w = m.weight.view(heads, 3, head_dim, d).transpose(0, 1).reshape(3 * d, d)
        return w, m.bias.view(heads, 3, head_dim).transpose(0, 1).reshape(3 * d)

    state = _State(cfg.bias)
    state["tok.weight"] = body.word_embeddings.weight
    state.norm("stack.embed_norm", body.word_embeddings_layernorm)
    for i, layer in enumerate(body.h):
        _put_block(
            state,
            f"stack.blocks.{i}",
            attn_norm=layer.input_layernorm,
            qkv=deinterleave(layer.self_attention.query_key_value),
            out=_wb(layer.self_attention.dense),
            ffn_norm=layer.post_attention_layernorm,
            up=_wb(layer.mlp.dense_h_to_4h),
            down=_wb(layer.mlp.dense_4h_to_h),
        )
    state.norm("stack.final_norm", body.ln_f)
    state["lm_head.weight"] = ref.lm_head.weight
    return _load(GPT(cfg), state, ref)


# ---------------------------------------------------------------------------------------------
# encoder -> BertMLM


@_register("BertForMaskedLM")
def _bert(ref: nn.Module) -> BertMLM:
    c, body, head = ref.config, ref.bert, ref.cls.predictions
    _unsupported(c.is_decoder or c.add_cross_attention, "a BERT decoder")
    position_type = getattr(c, "position_embedding_type", "absolute")  # gone in transformers 5
    _unsupported(position_type != "absolute", f"BERT position_embedding_type={position_type!r}")
    gelu = _hf_activation(c.hidden_act)
    _unsupported(gelu["activation"] != "gelu", f"BERT hidden_act={c.hidden_act!r} (the MLM head is GELU)")
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
        tie_embeddings=_shared(head.decoder.weight, emb.word_embeddings.weight),
    )
    state = _State(cfg.bias)
    state["tok.weight"] = emb.word_embeddings.weight
    # our model has no token types: every token is type 0, a constant added at every position
    state["stack.pos.table.weight"] = emb.position_embeddings.weight + emb.token_type_embeddings.weight[0]
    state.norm("stack.embed_norm", emb.LayerNorm)
    for i, layer in enumerate(body.encoder.layer):
        attn = layer.attention
        _put_block(
            state,
            f"stack.blocks.{i}",
            attn_norm=attn.output.LayerNorm,
            qkv=_cat_wb(attn.self.query, attn.self.key, attn.self.value),
            out=_wb(attn.output.dense),
            ffn_norm=layer.output.LayerNorm,
            up=_wb(layer.intermediate.dense),
            down=_wb(layer.output.dense),
        )
    state.linear("head_dense", *_wb(head.transform.dense))
    state.norm("head_norm", head.transform.LayerNorm)
    state["lm_head.weight"], state["lm_head.bias"] = head.decoder.weight, head.decoder.bias
    return _load(BertMLM(cfg), state, ref)


# ---------------------------------------------------------------------------------------------
# encoder-decoder -> EncoderDecoder


@_register("T5ForConditionalGeneration")
def _t5(ref: nn.Module) -> EncoderDecoder:
    c = ref.config
    _unsupported(c.num_decoder_layers != c.num_layers, "T5 with num_decoder_layers != num_layers")
    _unsupported(c.d_kv * c.num_heads != c.d_model, f"T5 d_kv={c.d_kv} != d_model/num_heads")
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
        **_hf_activation(c.dense_act_fn, gated=c.is_gated_act),
        dropout=c.dropout_rate,
        t5_num_buckets=c.relative_attention_num_buckets,
        t5_max_distance=c.relative_attention_max_distance,
        bias=False,
        norm_eps=c.layer_norm_epsilon,
        tie_embeddings=not scale_outputs and _shared(ref.lm_head.weight, ref.shared.weight),
        attn_scale=1.0,
    )
    state = _State(cfg.bias)
    state["tok.weight"] = ref.shared.weight

    def ffn(layer_ff: nn.Module) -> dict:
        dense = layer_ff.DenseReluDense
        up = _cat_wb(dense.wi_0, dense.wi_1) if c.is_gated_act else _wb(dense.wi)
        return dict(ffn_norm=layer_ff.layer_norm, up=up, down=_wb(dense.wo))

    for name, stack in (("encoder", ref.encoder), ("decoder", ref.decoder)):
        # one bias table per stack, held by its first layer's self-attention
        state[f"{name}.pos.bias.weight"] = stack.block[0].layer[0].SelfAttention.relative_attention_bias.weight
        for i, block in enumerate(stack.block):
            self_attn = block.layer[0].SelfAttention
            cross = None
            if name == "decoder":
                enc_dec = block.layer[1].EncDecAttention
                cross = (block.layer[1].layer_norm, _wb(enc_dec.q), _cat_wb(enc_dec.k, enc_dec.v), _wb(enc_dec.o))
            _put_block(
                state,
                f"{name}.blocks.{i}",
                attn_norm=block.layer[0].layer_norm,
                qkv=_cat_wb(self_attn.q, self_attn.k, self_attn.v),
                out=_wb(self_attn.o),
                cross=cross,
                **ffn(block.layer[-1]),
            )
        state.norm(f"{name}.final_norm", stack.final_layer_norm)
    lm_head = ref.lm_head.weight
    state["lm_head.weight"] = lm_head * c.d_model**-0.5 if scale_outputs else lm_head
    return _load(EncoderDecoder(cfg), state, ref)


# ---------------------------------------------------------------------------------------------
# timm VisionTransformer -> ViT


def _square(size, what: str) -> int:
    h, w = (size, size) if isinstance(size, int) else tuple(size)
    _unsupported(h != w, f"a non-square {what} {size}")
    return h


def _identity(module: nn.Module | None) -> bool:
    return module is None or isinstance(module, nn.Identity)


@_register("VisionTransformer")
def _timm_vit(ref: nn.Module) -> ViT:
    blocks = list(ref.blocks)
    first = blocks[0]
    _unsupported(ref.reg_token is not None, "timm ViT register tokens")
    _unsupported(ref.cls_token is not None and ref.no_embed_class, "timm ViT no_embed_class with a class token")
    _unsupported(getattr(ref, "dynamic_img_size", False), "timm ViT dynamic_img_size")
    _unsupported(not _identity(ref.norm_pre), "timm ViT pre_norm")
    _unsupported(not _identity(ref.patch_embed.norm), "timm ViT patch-embedding norm")
    _unsupported(getattr(ref, "attn_pool", None) is not None, f"timm ViT global_pool={ref.global_pool!r}")
    _unsupported(not isinstance(ref.head, nn.Linear), "a timm ViT without a classifier head (num_classes=0)")
    for b in blocks:
        _unsupported(type(b).__name__ != "Block", f"timm block {type(b).__name__}")
        _unsupported(type(b.attn).__name__ != "Attention", f"timm attention {type(b.attn).__name__}")
        _unsupported(type(b.mlp).__name__ != "Mlp", f"timm MLP {type(b.mlp).__name__}")
        _unsupported(not (_identity(b.ls1) and _identity(b.ls2)), "timm ViT layer scale (init_values)")
        _unsupported(
            not all(_identity(getattr(b.attn, n, None)) for n in ("q_norm", "k_norm", "norm")),
            "timm ViT qk_norm / scale_attn_norm",
        )
        _unsupported(getattr(b.attn, "gate", None) is not None, "timm ViT gated attention")
        _unsupported(not _identity(getattr(b.mlp, "norm", None)), "timm ViT scale_mlp_norm")
        _unsupported(type(b.mlp.act) is not nn.GELU, f"timm ViT activation {type(b.mlp.act).__name__}")
        for norm in (b.norm1, b.norm2):
            _unsupported(not isinstance(norm, nn.LayerNorm), f"timm ViT norm {type(norm).__name__}")

    has_cls = ref.cls_token is not None
    if has_cls and ref.global_pool == "token":
        pool = "cls"
    elif not has_cls and ref.global_pool == "avg":
        pool = "mean"
    else:
        raise ValueError(
            f"cannot convert: timm ViT global_pool={ref.global_pool!r} with class_token={has_cls}; the suite "
            f"ViT has 'token' pooling with a class token or 'avg' pooling without one"
        )
    # timm normalises all tokens before 'token' pooling (norm) or the pooled mean (fc_norm);
    # the suite ViT normalises the pooled vector, which is the same in both cases
    final_norm = ref.fc_norm if pool == "mean" else ref.norm
    _unsupported(not isinstance(final_norm, nn.LayerNorm), "timm ViT final_norm=False")

    proj = ref.patch_embed.proj
    cfg = ArchConfig(
        d_model=ref.embed_dim,
        n_layers=len(blocks),
        n_heads=first.attn.num_heads,
        d_ff=first.mlp.fc1.out_features,
        pos_encoding="learned" if ref.pos_embed is not None else "none",
        norm="layernorm",
        norm_placement="pre",
        activation="gelu",
        gelu_approximate=first.mlp.act.approximate,
        dropout=first.attn.proj_drop.p,
        norm_eps=first.norm1.eps,
    )
    model = ViT(
        cfg,
        image_size=_square(ref.patch_embed.img_size, "image size"),
        patch_size=_square(ref.patch_embed.patch_size, "patch size"),
        in_channels=proj.in_channels,
        num_classes=ref.num_classes,
        pool=pool,
    )
    state = _State(cfg.bias)
    state["patch.weight"] = proj.weight
    state["patch.bias"] = proj.bias if proj.bias is not None else proj.weight.new_zeros(proj.out_channels)
    if has_cls:
        state["cls"] = ref.cls_token
    if ref.pos_embed is not None:
        state["stack.pos.table.weight"] = ref.pos_embed[0]
    for i, b in enumerate(blocks):
        _put_block(
            state,
            f"stack.blocks.{i}",
            attn_norm=b.norm1,
            qkv=_wb(b.attn.qkv),  # timm's qkv rows are already (3, heads, head_dim)
            out=_wb(b.attn.proj),
            ffn_norm=b.norm2,
            up=_wb(b.mlp.fc1),
            down=_wb(b.mlp.fc2),
        )
    state.norm("norm", final_norm)
    state["head.weight"], state["head.bias"] = ref.head.weight, ref.head.bias
    return _load(model, state, ref)
