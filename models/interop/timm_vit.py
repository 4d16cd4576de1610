"""timm's VisionTransformer -> ViT.

timm's qkv rows are already (3, heads, head_dim). timm normalises all tokens before 'token'
pooling (`norm`) or the pooled mean (`fc_norm`); the suite ViT normalises the pooled vector, which
is the same in both cases. Every timm option the suite ViT lacks is refused by name.
"""

from __future__ import annotations

from torch import nn

from ..config import ArchConfig
from ..vit import ViT
from .common import State, load, put_block, unsupported, wb

REFERENCE = "VisionTransformer"


def _square(size, what: str) -> int:
    h, w = (size, size) if isinstance(size, int) else tuple(size)
    unsupported(h != w, f"a non-square {what} {size}")
    return h


def _identity(module: nn.Module | None) -> bool:
    return module is None or isinstance(module, nn.Identity)


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
        unsupported(type(b.mlp.act) is not nn.GELU, f"timm ViT activation {type(b.mlp.act).__name__}")
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
    # timm normalises all tokens before 'token' pooling (norm) or the pooled mean (fc_norm);
    # the suite ViT normalises the pooled vector, which is the same in both cases
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
    state = State(cfg.bias)
    state["patch.weight"] = proj.weight
    state["patch.bias"] = proj.bias if proj.bias is not None else proj.weight.new_zeros(proj.out_channels)
    if has_cls:
        state["cls"] = ref.cls_token
    if ref.pos_embed is not None:
        state["stack.pos.table.weight"] = ref.pos_embed[0]
    for i, b in enumerate(blocks):
        put_block(
            state,
            f"stack.blocks.{i}",
            attn_norm=b.norm1,
            qkv=wb(b.attn.qkv),  # timm's qkv rows are already (3, heads, head_dim)
            out=wb(b.attn.proj),
            ffn_norm=b.norm2,
            up=wb(b.mlp.fc1),
            down=wb(b.mlp.fc2),
        )
    state.norm("norm", final_norm)
    state["head.weight"], state["head.bias"] = ref.head.weight, ref.head.bias
    return load(model, state, ref)
