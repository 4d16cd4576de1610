"""ViT training-step throughput against timm's VisionTransformer of identical architecture (the
suite model is built from the timm model by `models.interop.from_reference`, same weights)."""

from __future__ import annotations

import torch

from .common import Context, TrainStep
from .tables import Section, Table, Target
from .timing import interleaved, paired_detail, ratio_range


def run(ctx: Context) -> Section:
    import timm
    from timm.models.vision_transformer import VisionTransformer

    from models.interop import from_reference

    s = ctx.settings
    section = Section("vit", "ViT training step vs timm")
    torch.manual_seed(0)
    reference = VisionTransformer(
        img_size=s.vit_image,
        patch_size=s.vit_patch,
        embed_dim=s.vit_d_model,
        depth=s.vit_depth,
        num_heads=s.vit_heads,
        num_classes=s.vit_classes,
    )
    suite = from_reference(reference)
    g = torch.Generator().manual_seed(0)
    images = torch.randn(s.vit_batch, 3, s.vit_image, s.vit_image, generator=g)
    labels = torch.randint(0, s.vit_classes, (s.vit_batch,), generator=g)
    reference.eval()
    with torch.no_grad():
        diff = (suite(images) - reference(images)).abs().max().item()
    fused = getattr(reference.blocks[0].attn, "fused_attn", None)
    times = interleaved(
        {
            "suite ViT": TrainStep(suite).on(images, labels),
            "timm VisionTransformer": TrainStep(reference).on(images, labels),
        },
        s.reps,
        s.warmup,
    )
    flops = 3.0 * suite.flops_per_image()
    table = Table(
        ["model", "step time", "images/s (median, min–max)", "MFU (3 × forward FLOPs)"],
        title=f"img {s.vit_image}, patch {s.vit_patch}, d {s.vit_d_model}, depth {s.vit_depth}, "
        f"heads {s.vit_heads}, {s.vit_classes} classes, batch {s.vit_batch}; timm {timm.__version__} "
        f"fused_attn={fused}",
    )
    for name, t in times.items():
        rate = t.rate(s.vit_batch)
        table.add(name, t.fmt("ms"), rate.fmt(), f"{rate.median * flops / ctx.peak_flops:.1%}")
    section.tables.append(table)
    r = ratio_range(times["timm VisionTransformer"], times["suite ViT"])
    section.targets.append(Target("suite ViT ÷ timm (images/s)", r[0], 1.0, detail=paired_detail(r, 1.0)))
    section.notes.append(f"Same weights (from_reference); max |logit difference| suite vs timm: {diff:.2e}.")
    section.data = {name: t.to_json() for name, t in times.items()} | {"speedup": r, "max_logit_diff": diff}
    return section
