"""The timm VisionTransformer cases of the interop tests (`interop_cases` holds the language models'),
shared by the parity test (`test_interop_vit_registry`) and the round trips (`test_interop_round_trip`):
tiny configs, random init, nothing downloaded."""

from __future__ import annotations

VIT_CASES = {
    "vit-cls-token": (
        dict(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=4, mlp_ratio=2.0, num_classes=7),
        "cls",
    ),
    "vit-avg-fc_norm-no_qkv_bias": (
        dict(
            img_size=12,
            patch_size=4,
            in_chans=1,
            embed_dim=48,
            depth=2,
            num_heads=3,
            mlp_ratio=1.5,
            num_classes=5,
            class_token=False,
            global_pool="avg",
            qkv_bias=False,
        ),
        "mean",
    ),
}
