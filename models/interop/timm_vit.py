"""timm's VisionTransformer <-> ViT.

timm's qkv rows are already (3, heads, head_dim). timm normalises all tokens before 'token'
pooling (`norm`) or the pooled mean (`fc_norm`); the suite ViT normalises the pooled vector, which
is the same in both cases. Every timm option the suite ViT lacks is refused by name.

An exported model is built by `timm.create_model` from JSON-able arguments, so the folder the export
command writes (weights and timm's config.json) rebuilds exactly it: `timm.create_model("local-dir:DIR")`.
"""

from __future__ import annotations

import math

from torch import nn

from ..config import ArchConfig
from ..vit import ViT
from .reference_config import unsupported
from .targets import Target, heads_shared_by_all
from .weight_table import Pair, Transform, block, export, load, module, nonzero, tensor

REFERENCE = "VisionTransformer"
ENTRY_POINT = "vit_base_patch16_224"  # any timm ViT entry point: the exported arguments override all its settings
TIMM_NORM_EPS = 1e-6  # timm's LayerNorm; its config.json cannot name another
TIMM_GELU = {"GELU": "none", "GELUTanh": "tanh"}  # timm's own GELU layers (act_layer "gelu", "gelu_tanh")

# timm's (1, tokens, d) position table <-> ours (tokens, d)
BATCHED = Transform(lambda t: t[0], lambda t: (t[None],))


def table(cfg: ArchConfig, pool: str) -> list[Pair]:
    pairs = module("patch", "patch_embed.proj")
    if pool == "cls":
        pairs += tensor("cls", "cls_token")
    if cfg.pos_encoding == "learned":
        pairs += tensor("stack.pos.table.weight", "pos_embed", BATCHED)
    for i in range(cfg.n_layers):
        b = f"blocks.{i}"
        pairs += block(
            f"stack.blocks.{i}",
            attn_norm=f"{b}.norm1",
            qkv=f"{b}.attn.qkv",  # timm's qkv rows are already (3, heads, head_dim)
            out=f"{b}.attn.proj",
            ffn_norm=f"{b}.norm2",
            up=f"{b}.mlp.fc1",
            down=f"{b}.mlp.fc2",
        )
    # timm normalises all tokens before 'token' pooling (norm) or the pooled mean (fc_norm);
    # the suite ViT normalises the pooled vector, which is the same in both cases
    return pairs + module("norm", "fc_norm" if pool == "mean" else "norm") + module("head", "head")


def _square(size, what: str) -> int:
    h, w = (size, size) if isinstance(size, int) else tuple(size)
    unsupported(h != w, f"a non-square {what} {size}")
    return h


def _identity(module: nn.Module | None) -> bool:
    return module is None or isinstance(module, nn.Identity)


def _gelu_approximate(act: nn.Module) -> str:
    """The `gelu_approximate` of torch's or timm's GELU layer."""
    if type(act) is nn.GELU:
        return act.approximate
    name = type(act).__name__
    unsupported(name not in TIMM_GELU, f"timm ViT activation {name}")
    return TIMM_GELU[name]


def _check_blocks(blocks: list[nn.Module]) -> None:
    for b in blocks:
        unsupported(type(b).__name__ != "Block", f"timm block {type(b).__name__}")
        unsupported(type(b.attn).__name__ != "Attention", f"timm attention {type(b.attn).__name__}")
        unsupported(type(b.mlp).__name__ != "Mlp", f"timm MLP {type(b.mlp).__name__}")
        unsupported(not (_identity(b.ls1) and _identity(b.ls2)), "timm ViT layer scale (init_values)")
        unsupported(
            not all(_identity(getattr(b.attn, n, None)) for n in ("q_norm", "k_norm", "norm")),
            "timm ViT qk_norm / scale_attn_norm",
        )
        unsupported(getattr(b.attn, "gate", None) is not None, "timm ViT gated attention")
        unsupported(not _identity(getattr(b.mlp, "norm", None)), "timm ViT scale_mlp_norm")
        _gelu_approximate(b.mlp.act)
        for norm in (b.norm1, b.norm2):
            unsupported(not isinstance(norm, nn.LayerNorm), f"timm ViT norm {type(norm).__name__}")


def convert(ref: nn.Module) -> ViT:
    blocks = list(ref.blocks)
    first = blocks[0]
    unsupported(ref.reg_token is not None, "timm ViT register tokens")
    unsupported(ref.cls_token is not None and ref.no_embed_class, "timm ViT no_embed_class with a class token")
    unsupported(getattr(ref, "dynamic_img_size", False), "timm ViT dynamic_img_size")
    unsupported(not _identity(ref.norm_pre), "timm ViT pre_norm")
    unsupported(not _identity(ref.patch_embed.norm), "timm ViT patch-embedding norm")
    unsupported(getattr(ref, "attn_pool", None) is not None, f"timm ViT global_pool={ref.global_pool!r}")
    unsupported(not isinstance(ref.head, nn.Linear), "a timm ViT without a classifier head (num_classes=0)")
    _check_blocks(blocks)

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
    final_norm = ref.fc_norm if pool == "mean" else ref.norm
    unsupported(not isinstance(final_norm, nn.LayerNorm), "timm ViT final_norm=False")

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
        gelu_approximate=_gelu_approximate(first.mlp.act),
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
    return load(model, ref, table(cfg, pool))


def timm_arguments(model: ViT) -> dict:
    """`timm.create_model` arguments (JSON-able) of the timm ViT equivalent to `model`."""
    cfg = model.cfg
    patch = model.patch.kernel_size[0]
    grid = math.isqrt(model.num_tokens - (model.pool == "cls"))
    mlp_ratio = cfg.ffn_dim / cfg.d_model
    if int(cfg.d_model * mlp_ratio) != cfg.ffn_dim:  # timm's Mlp is int(dim * mlp_ratio) wide
        raise ValueError(
            f"cannot export: d_ff={cfg.ffn_dim} has no equivalent in timm VisionTransformer (its MLP width "
            f"int(d_model * mlp_ratio) misses it in floating point); choose d_ff a multiple of d_model"
        )
    args = dict(
        img_size=grid * patch,
        patch_size=patch,
        in_chans=model.patch.in_channels,
        num_classes=model.head.out_features,
        global_pool="token" if model.pool == "cls" else "avg",
        class_token=model.pool == "cls",
        pos_embed="learn" if cfg.pos_encoding == "learned" else "none",
        embed_dim=cfg.d_model,
        depth=cfg.n_layers,
        num_heads=cfg.n_heads,
        mlp_ratio=mlp_ratio,
        # timm's bias flags where the suite's biases are non-zero (a zero bias is no bias)
        qkv_bias=nonzero(model, "attn.qkv.bias"),
        proj_bias=nonzero(model, "attn.out.bias", "ffn.up.bias", "ffn.down.bias"),
        proj_drop_rate=cfg.dropout,
        attn_drop_rate=cfg.dropout,
        pos_drop_rate=cfg.dropout,
    )
    if cfg.gelu_approximate == "tanh":
        args["act_layer"] = "gelu_tanh"  # else timm's default, torch's exact nn.GELU
    return args


def to_timm_vit(model: ViT) -> nn.Module:
    """The timm VisionTransformer equivalent to `model` (settings checked by `TARGET`), made by
    `timm.create_model` so that timm's own config records how to rebuild it."""
    import timm

    if model.learned_layout != "1d":  # a ViT argument, not an ArchConfig setting: TARGET cannot see it
        raise ValueError(
            f"cannot export: learned_layout={model.learned_layout!r} has no equivalent in {TARGET.library} "
            "(it has one 1-D pos_embed: learned_layout='1d')"
        )
    # the entry point's pretrained tag and license describe its weights, not these
    unrelated = dict(tag=None, license=None)
    reference = timm.create_model(
        ENTRY_POINT, pretrained=False, pretrained_cfg_overlay=unrelated, **timm_arguments(model)
    )
    return export(reference, model, table(model.cfg, model.pool))


TARGET = Target(
    library="timm VisionTransformer",
    suite=ViT,
    settings={
        "pos_encoding": ("learned", "none"),  # timm ViT's pos_embed: 'learn' or 'none'
        "learned_pos_offset": (0,),
        "norm": ("layernorm",),
        "norm_placement": ("pre",),
        "activation": ("gelu",),
        "n_kv_heads": heads_shared_by_all,
        "embedding_norm": (False,),
        "norm_eps": (TIMM_NORM_EPS,),
        "attn_scale": (None,),
    },
    export=to_timm_vit,
)
