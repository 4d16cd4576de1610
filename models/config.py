"""The one typed architecture config: every ablation axis is a `Literal` field.

Importable without torch so the CLI can validate flags before building anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from contract.errors import ConfigError  # noqa: F401  (re-exported: every config check raises it)
from contract.labels import IGNORE_INDEX  # noqa: F401  (re-exported: the models compute the loss with it)

from .config_checks import check
from .parametrization import PARAMETRIZATIONS, Parametrization, Scheme
from .positional_facts import POSITIONAL_FACTS, PosEncoding, PositionalFacts  # re-exported

NormName = Literal["layernorm", "rmsnorm", "dyt"]
NormPlacement = Literal["pre", "post", "peri", "reordered"]
QKNormName = Literal["none", "layernorm", "rmsnorm"]
QKNormScope = Literal["projection", "head"]
Activation = Literal["relu", "gelu", "silu", "swiglu", "geglu"]
GeluApproximation = Literal["none", "tanh"]
BiasBackward = Literal["blockwise", "math"]
SinusoidalLayout = Literal["interleaved", "halves"]

GATED_ACTIVATIONS = {"swiglu", "geglu"}  # a plugin adds its own (`models.ffn.register_activation(gated=True)`)

# the fields whose value must be one of their `Literal`'s (`config_checks.check`)
LITERALS = (
    ("pos_encoding", PosEncoding),
    ("norm", NormName),
    ("norm_placement", NormPlacement),
    ("activation", Activation),
    ("gelu_approximate", GeluApproximation),
    ("bias_backward", BiasBackward),
    ("sinusoidal_layout", SinusoidalLayout),
    ("qk_norm", QKNormName),
    ("qk_norm_scope", QKNormScope),
    ("parametrization", Parametrization),
)

# the axes a plugin may add a variant to (`models.plugins`): field -> the name of its `Literal` in this module
AXES = {
    "norm": "NormName",
    "pos_encoding": "PosEncoding",
    "norm_placement": "NormPlacement",
    "activation": "Activation",
}
BUILT_IN: dict[str, tuple[str, ...]] = {field: get_args(globals()[alias]) for field, alias in AXES.items()}
REGISTERED: dict[str, dict[str, str]] = {field: {} for field in AXES}  # field -> registered name -> its module


def register_name(field: str, name: str, owner: str) -> None:
    """Makes `name` a valid value of the axis `field` (a plugin's variant, registered by module `owner`).

    The axis's `Literal` (`NormName`, ...) is widened in this module, where jsonargparse resolves
    `ArchConfig`'s annotations and `check` reads `LITERALS`: the parser accepts the name and both list the
    built-in names, then the registered ones. The same module registering a name again (imported anew in a
    process) is no clash.

    Raises:
        ConfigError: not an axis, not a name, or a name already taken (built in, or another module's).
    """
    global LITERALS
    if field not in AXES:
        raise ConfigError(f"{field!r} is not an axis a plugin can extend; choose one of {', '.join(AXES)}")
    if not isinstance(name, str) or not name or any(c in name for c in " ,'\"[]{}:"):
        raise ConfigError(f"{field}: {name!r} is not a usable name (a non-empty word)")
    holder = "the suite (built in)" if name in BUILT_IN[field] else REGISTERED[field].get(name, owner)
    if holder != owner:
        raise ConfigError(f"{field}={name!r} is taken by {holder}; register the variant under another name")
    REGISTERED[field][name] = owner
    widened = Literal[(*BUILT_IN[field], *REGISTERED[field])]
    globals()[AXES[field]] = widened
    LITERALS = tuple((f, widened if f == field else literal) for f, literal in LITERALS)


def plugin_settings(cfg: object) -> list[str]:
    """`field='name' (module M)` for each axis of `cfg` set to a plugin's variant (no reference family has one)."""
    found = ((field, cfg.get(field) if isinstance(cfg, dict) else getattr(cfg, field, None)) for field in AXES)
    return [
        f"{field}={value!r} (a plugin's, {REGISTERED[field][value]})"
        for field, value in found
        if value in REGISTERED[field]
    ]


def default_d_ff(d_model: int, activation: str, multiple_of: int = 64) -> int:
    """Hidden width of the FFN when `d_ff` is not given.

    Plain FFNs use 4·d. Gated FFNs have three matrices instead of two, so they use 8/3·d rounded
    up to a multiple of `multiple_of` (Shazeer 2020; Llama's `multiple_of`, 64 by default here) to keep
    the parameter count comparable: 2·d·4d = 8d² for plain, 3·d·(8/3)d = 8d² for gated. Rounding up
    adds up to 64 units: 12.5% more FFN weights at d 64, 0 at d 96, 12.6% at d 128; `multiple_of=1`
    gives int(8/3·d), parameter-matched at every width (Shazeer's Table 1; the ffn_norm ladder).
    """
    if activation in GATED_ACTIVATIONS:
        return -(-int(8 * d_model / 3) // multiple_of) * multiple_of
    return 4 * d_model


@dataclass(frozen=True)
class ArchConfig:
    """Architecture of every model in the suite.

    Args:
        vocab_size: token vocabulary (linked from the data at run time; unused by ViT).
        d_model: residual stream width.
        n_layers: number of blocks (per stack for the encoder-decoder, unless set apart below).
        n_encoder_layers: the encoder-decoder's encoder depth; `None` means `n_layers`.
        n_decoder_layers: the encoder-decoder's decoder depth; `None` means `n_layers`. A deep encoder
            and a shallow decoder keep quality and decode faster (Kasai et al. 2021).
        n_heads: query heads.
        n_kv_heads: key/value heads (GQA/MQA); `None` means `n_heads` (MHA).
        head_dim: each head's width, apart from d_model: the query projection is d_model -> n_heads·head_dim
            and the output projection back (Qwen3-0.6B: d 1,024, 16 heads of 128; gemma-2-2b: d 2,304, 8
            of 256); `None` means d_model / n_heads, which must then divide. `d_head` is the width in use.
        d_ff: FFN hidden width; `None` picks `default_d_ff(d_model, activation, ffn_multiple_of)`.
        ffn_multiple_of: a gated FFN's default width (`d_ff: None`) is 8/3·d rounded up to this
            multiple (Llama's `multiple_of`); 1 matches a plain FFN's parameters exactly at any width.
        max_seq_len: longest sequence for `learned` positions (and the first size of the other
            schemes' cached tables); `None` takes it from the data: a task module sets it to the
            data's longest sequence (`data_info`), so it is set by hand only to differ from that.
        pos_encoding: positional scheme (ablation axis).
        sinusoidal_layout: where `sinusoidal` puts each frequency's sine and cosine: `interleaved`
            (dims 2i, 2i+1: Vaswani et al., tensor2tensor's paper) or `halves` (all sines, then all
            cosines: fairseq, Marian).
        learned_pos_offset: rows of a `learned` table before position 0 (BART's 2, a fairseq legacy
            of padding-aware positions); they are never read.
        norm: normalisation layer (ablation axis); `dyt` is Dynamic Tanh (Zhu et al. 2025),
            γ·tanh(αx) + β with a learned scalar α per layer, no statistics.
        norm_placement: `pre` (x + f(norm(x)), final norm), `post` (norm(x + f(x)), Vaswani et al.),
            `peri` (x + norm(f(norm(x))), a norm on each sublayer's input and output: Gemma 2, Peri-LN; with
            Peri-LN's embedding norm unless `peri_embedding_norm: false`)
            or `reordered` (x + norm(f(x)), OLMo 2); all but `post` end the stack with a norm.
        qk_norm: a norm on the queries and keys before RoPE and the dot product (Wortsman et al. 2023's fix
            for attention-logit growth; OLMo 2, Qwen 3, Gemma 3): `none`, `layernorm` or `rmsnorm`.
        qk_norm_scope: `projection` normalises the whole query and key projections (OLMo 2), `head` each
            head's vector with one norm shared by the heads (Qwen 3).
        attn_softcap: caps every attention score at ±c, c·tanh(s/c), before the mask (Gemma 2: 50); `None`
            means none. SDPA's kernels cannot cap, so a capped layer computes its (B, H, T, S) scores in torch ops.
        logit_softcap: caps the output logits at ±c, c·tanh(x/c), every family's (Gemma 2: 30); `None` means none.
        dyt_alpha: Dynamic Tanh's initial α, of every norm but the attention sublayers' (the paper's α0:
            0.5 for non-LLM models; its LLaMA runs use 0.2 here and a larger `dyt_alpha_attention`).
        dyt_alpha_attention: the initial α of the attention sublayers' norms; `None` means `dyt_alpha`.
        activation: FFN activation (ablation axis); `silu` is an ungated SiLU (Swish) FFN (Marian).
        dropout: dropout on embeddings, attention weights and residual branches.
        drop_path: stochastic depth (Huang et al. 2016; DeiT): the largest probability of dropping a
            whole residual branch per sample in training, rising linearly from 0 at the first block to
            this at the last of each stack (timm's `DropPath`). 0 builds no DropPath module at all.
        rope_base: RoPE frequency base θ.
        rope_fraction: fraction of each head's dims that are rotated (GPT-NeoX partial rotary).
        rope_layers: with `rope`, the layers (0-based, in each stack) whose attention rotates; the others use
            no positions (NoPE), e.g. every fourth layer NoPE as in recent long-context models. `None`: all.
        t5_num_buckets: relative-position buckets of the T5 bias.
        t5_max_distance: distance beyond which T5 buckets saturate.
        bias: biases in linear layers and norms.
        norm_eps: epsilon of every norm.
        embedding_norm: a norm right after the embeddings (BERT, BLOOM), under any placement.
        peri_embedding_norm: under `peri`, a norm after the embeddings too, as Kim et al. 2025's Peri-LN has (y₀ =
            Norm(x)): each sublayer adds a unit-RMS output to the stream, which would drown 0.02-scale
            embeddings from the first block on. `false` is Gemma 2's sandwich, which multiplies them by
            sqrt(d_model) instead (`scale_embeddings: true`).
        tie_embeddings: output projection shares the token embedding matrix.
        output_bias: the encoder-decoder's output projection has a bias (Marian's and BART's
            `final_logits_bias`).
        attn_scale: score scale; `None` means 1/sqrt(head_dim) (T5 uses 1.0).
        gelu_approximate: GELU's tanh approximation (GPT-2, BLOOM, T5 v1.1) or exact.
        scale_embeddings: multiply token embeddings by sqrt(d_model); `None` means "as the
            scheme's authors did" (`PositionalFacts.scales_embeddings`: on for `sinusoidal` only).
        learn_embed_scale: multiply token embeddings by a learned scalar initialised to sqrt(d_model), in place
            of the fixed `scale_embeddings` factor (Dynamic Tanh's LLaMA recipe, Zhu et al. 2025's released code:
            DyT has no statistics to rescale a 0.02-scale residual stream, whose signal then vanishes). Their
            0.02-scale table times sqrt(4096) starts LLaMA-7B's embeddings near unit RMS (1.28); the table here
            starts at N(0, 1/d_model), so they start at unit RMS at every width (0.02 × sqrt(64) would be 0.16).
            `None` means "as DyT's authors did": on with `norm: dyt` only.
        scaled_residual_init: GPT-2 init: residual output projections get std
            init_std/sqrt(2·depth), depth being the blocks of their stack.
        activation_checkpointing: keep only each block's input in a training forward and recompute
            the block's activations in the backward pass (Chen et al. 2016): about one more forward
            per step for less activation memory. Training only (not in evaluation or with a KV
            cache); gradients are the same as without it, dropout included (its RNG state is replayed).
        parametrization: how init, forward multipliers and per-parameter Adam settings scale with width and
            depth (`models.parametrization`, whose table the README prints): `sp` (standard), `mup` (µP: Yang et
            al. 2022) or `completep` (µP plus CompleteP's depth rules, α = 1: Dey et al. 2025); under the latter
            two a learning rate tuned at the base shape holds at every width (and depth).
        base_width: the d_model that `mup`/`completep` are relative to (m_N = d_model / base_width); `None`
            means d_model (m_N = 1: the model is its own base).
        base_depth: the depth `completep` is relative to (m_L = a stack's depth / base_depth); `None`: n_layers.
        bias_backward: how attention applies a relative score bias (ALiBi, T5): `blockwise` keeps it
            per distance and applies it per block of queries, forward and backward (flex_attention on
            CUDA; `models.relative_bias`; no (B, H, T, T) tensor; on CPU causal ALiBi rides inside q·k and
            causal T5 attends its last bucket's keys unmasked, `models.far_bias`); `math` builds the dense mask for
            SDPA (its math kernel when the bias needs a gradient). Same values and gradients to float
            rounding; with attention dropout in training, `math` is used. (The name predates ALiBi's use.)
    """

    vocab_size: int = 256
    d_model: int = 128
    n_layers: int = 4
    n_encoder_layers: int | None = None
    n_decoder_layers: int | None = None
    n_heads: int = 4
    n_kv_heads: int | None = None
    head_dim: int | None = None
    d_ff: int | None = None
    ffn_multiple_of: int = 64
    max_seq_len: int | None = None
    pos_encoding: PosEncoding = "learned"
    sinusoidal_layout: SinusoidalLayout = "interleaved"
    learned_pos_offset: int = 0
    norm: NormName = "layernorm"
    norm_placement: NormPlacement = "pre"
    activation: Activation = "gelu"
    dropout: float = 0.0
    drop_path: float = 0.0
    rope_base: float = 10000.0
    rope_fraction: float = 1.0
    rope_layers: tuple[int, ...] | None = None
    t5_num_buckets: int = 32
    t5_max_distance: int = 128
    bias: bool = True
    norm_eps: float = 1e-5
    embedding_norm: bool = False
    peri_embedding_norm: bool = True
    tie_embeddings: bool = True
    output_bias: bool = False
    attn_scale: float | None = None
    gelu_approximate: GeluApproximation = "none"
    scale_embeddings: bool | None = None
    learn_embed_scale: bool | None = None
    init_std: float = 0.02
    scaled_residual_init: bool = True
    activation_checkpointing: bool = False
    bias_backward: BiasBackward = "blockwise"
    dyt_alpha: float = 0.5
    dyt_alpha_attention: float | None = None
    parametrization: Parametrization = "sp"
    base_width: int | None = None
    base_depth: int | None = None
    qk_norm: QKNormName = "none"
    qk_norm_scope: QKNormScope = "projection"
    attn_softcap: float | None = None
    logit_softcap: float | None = None

    def __post_init__(self) -> None:
        check(self, LITERALS)

    @property
    def final_norm(self) -> bool:
        """A norm after the last block: every placement that leaves the residual stream unnormalised."""
        return self.norm_placement != "post"

    @property
    def d_head(self) -> int:
        """Each head's width: `head_dim`, else d_model / n_heads."""
        return self.head_dim or self.d_model // self.n_heads

    @property
    def encoder_layers(self) -> int:
        return self.n_encoder_layers or self.n_layers

    @property
    def decoder_layers(self) -> int:
        return self.n_decoder_layers or self.n_layers

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def ffn_dim(self) -> int:
        return self.d_ff or default_d_ff(self.d_model, self.activation, self.ffn_multiple_of)

    @property
    def rotary_dim(self) -> int:
        return int(self.d_head * self.rope_fraction)

    @property
    def positional(self) -> PositionalFacts:
        """The facts of `pos_encoding`."""
        return POSITIONAL_FACTS[self.pos_encoding]

    @property
    def normalizes_embeddings(self) -> bool:
        return self.embedding_norm or (self.norm_placement == "peri" and self.peri_embedding_norm)

    @property
    def learns_embed_scale(self) -> bool:
        return self.norm == "dyt" if self.learn_embed_scale is None else self.learn_embed_scale

    @property
    def embed_scale(self) -> float:
        scale = self.positional.scales_embeddings if self.scale_embeddings is None else self.scale_embeddings
        return self.embed_width**0.5 if scale else 1.0

    @property
    def scheme(self) -> Scheme:
        """The rules of `parametrization`."""
        return PARAMETRIZATIONS[self.parametrization]

    @property
    def width_mult(self) -> float:
        """m_N: d_model over the base width (1 under `sp`)."""
        return self.d_model / (self.base_width or self.d_model)

    def depth_mult(self, depth: int) -> float:
        """m_L of a stack of `depth` blocks (1 unless `completep` with a `base_depth`)."""
        return depth / (self.base_depth or depth)

    @property
    def embed_width(self) -> int:
        """The width whose square root scales a scaled token table (`embed_scale`, the learned gain's start)."""
        return self.base_width or self.d_model if self.scheme.base_width_embeddings else self.d_model

    @property
    def base_head_dim(self) -> int:
        """The head width at the base shape: `head_dim` when set (a ladder that widens by adding heads), else
        base_width / n_heads (one that widens each head)."""
        return self.head_dim or (self.base_width or self.d_model) // self.n_heads

    @property
    def attention_scale(self) -> float | None:
        """The attention score scale: `attn_scale`, else under µP √base_head_dim / d_head, else None (SDPA's
        1/√d_head). µP's 1/d_head carries the constant that makes it SP's 1/√d_head at the base head width (TP5's
        GPT-3 runs use 8/d_head at a base head width of 64), so that a µP model at its base shape is the SP model;
        a bare 1/d_head would shrink the scores √d_head-fold there (4x at head width 16)."""
        if self.attn_scale is not None or self.scheme.attention_exponent == 0.5:
            return self.attn_scale
        exponent = self.scheme.attention_exponent
        return self.base_head_dim ** (exponent - 0.5) * self.d_head**-exponent
