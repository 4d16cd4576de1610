"""The parametrizations' coordinate check (`python cli.py bench --sections coord_check`): does the size of every
layer's activations stay put as the model widens (µP) or deepens (CompleteP) while it trains?

Tensor Programs V's check (Yang et al. 2022, Fig. 5; the `mup` package's `get_coord_data`): each family at
widths `coord_widths` (under `sp` and `mup`, base width the smallest) and at depths `coord_depths` (under `mup`
and `completep` at width `coord_depth_width`, base depth the smallest) trains `coord_steps` Adam steps at one
fixed learning rate on one synthetic batch (`coord_data`), and the slope of log RMS against log width (or
depth) of each quantity at the last step says how it scales: ≈ 0 flat, 1 linear growth. A quantity fails when
|slope| > `coord_tolerance` (attention logits only by growing; `coord_data.not_flat`).

Writes, under `--out`/coord_check/ (coord_check-smoke/ in smoke mode): one figure per family, parametrization
and axis (RMS against size, one line per quantity, one panel per step, log-log), `coord_check.json` (every
number), `slopes.md` (every quantity's slope) and `tensorboard/` (the figures and the slope table).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .common import Context, Settings
from .coord_data import Shape, coord_data, is_attention_logits, not_flat, slopes
from .tables import Section, Table, Target

WIDTH = ("sp", "mup")  # the parametrizations compared over width, and over depth
DEPTH = ("mup", "completep")


def shape(s: Settings) -> Shape:
    return Shape(seq_len=s.coord_seq_len, batch_size=s.coord_batch, n_heads=s.coord_heads)


def measure_all(s: Settings) -> list[dict]:
    """`coord_data` of every family under every parametrization of both axes."""
    common = dict(seeds=s.coord_seeds, steps=s.coord_steps, lr=s.coord_lr, shape=shape(s))
    runs = []
    for family in s.coord_families:
        runs += [coord_data(family, p, s.coord_widths, [s.coord_depth], **common) for p in WIDTH]
        runs += [coord_data(family, p, [s.coord_depth_width], s.coord_depths, **common) for p in DEPTH]
    return runs


def _worst(values: dict[str, float]) -> tuple[str, float]:
    if not values:
        return "—", math.nan
    return max(values.items(), key=lambda kv: abs(kv[1]) if math.isfinite(kv[1]) else math.inf)


def summary_table(runs: list[dict], axis: str, tolerance: float) -> Table:
    """One row per family and parametrization: the slopes at the last step that decide the check."""
    title = (
        f"Slope of log RMS against log {axis} at the last step (0: flat; "
        f"passes within ±{tolerance:g}, attention logits only by not growing)"
    )
    table = Table(
        ["family", "parametrization", "logits", "largest |slope| of a layer", "attention logits (max)", "check"],
        title=title,
    )
    for data in (r for r in runs if r["axis"] == axis):
        found = slopes(data)
        layers = {k: v for k, v in found.items() if k != "logits" and not is_attention_logits(k)}
        attention = [v for k, v in found.items() if is_attention_logits(k)]
        name, value = _worst(layers)
        failed = not_flat(data, tolerance)
        verdict = "flat" if not failed else "not flat: " + ", ".join(f"{k} {v:+.2f}" for k, v in failed.items())
        table.add(data["family"], data["parametrization"], f"{found['logits']:+.2f}", f"{name} {value:+.2f}",
                  f"{max(attention):+.2f}", verdict)  # fmt: skip
    return table


def slopes_markdown(runs: list[dict]) -> str:
    """Every quantity's slope per family, parametrization and axis: at init, at the last step, and of its change."""
    lines = ["# Coordinate check: slopes of log RMS against log size", ""]
    for data in runs:
        sizes = ", ".join(map(str, data["sizes"]))
        lines += [
            f"## {data['family']}, `{data['parametrization']}`, over {data['axis']} ({sizes})",
            "",
            f"| quantity | RMS at init | RMS at step {data['steps']} | change since init at step {data['steps']} |",
            "|---|---|---|---|",
        ]
        init, last, delta = slopes(data, 0), slopes(data), slopes(data, kind="delta")
        lines += [f"| {q} | {init[q]:+.2f} | {last[q]:+.2f} | {delta[q]:+.2f} |" for q in data["quantities"]]
        lines.append("")
    return "\n".join(lines)


def figure(data: dict):
    """RMS against size on log-log axes, one panel per step, one line per quantity."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = data["steps"] + 1
    cols = min(steps, 3)
    rows = math.ceil(steps / cols)
    width = 4.2 * cols + 2.6  # the legend on the right
    fig, axes = plt.subplots(rows, cols, figsize=(width, 3.4 * rows + 0.6), squeeze=False, sharex=True)
    names = list(data["quantities"])
    colours = plt.get_cmap("viridis")(
        [i / max(1, len(names) - 1) for i in range(len(names))]
    )  # layers in forward order, dark to light
    for step, ax in enumerate(axes.flat):
        if step >= steps:
            ax.set_visible(False)
            continue
        for name, colour in zip(names, colours):
            values = [per_step[step] for per_step in data["quantities"][name]["rms"]]
            style = dict(color="black", lw=2.2) if name == "logits" else dict(color=colour, lw=1.2)
            ax.plot(data["sizes"], values, "--" if is_attention_logits(name) else "-", marker=".", label=name, **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"step {step}" + (" (init)" if step == 0 else ""), fontsize="medium")
        ax.set_xlabel(data["axis"])
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("RMS")
    fig.suptitle(
        f"{data['family']}, {data['parametrization']}: coordinate check over {data['axis']} "
        f"(Adam lr {data['lr']:g}, {data['seeds']} seeds)"
    )
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize="x-small")
    fig.tight_layout(rect=(0, 0, 1 - 2.6 / width, 1))
    return fig


def write_outputs(runs: list[dict], table_md: str, folder: Path, dpi: int = 80) -> list[Path]:
    """The figures (PNG and TensorBoard), the numbers and the slopes under `folder`; returns the figures' paths.
    Each figure is drawn once: its pixels go to the PNG and to TensorBoard's image."""
    import matplotlib.pyplot as plt
    import numpy as np
    from PIL import Image
    from torch.utils.tensorboard import SummaryWriter

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "coord_check.json").write_text(json.dumps(runs, indent=1) + "\n")
    (folder / "slopes.md").write_text(slopes_markdown(runs))
    paths = []
    writer = SummaryWriter(str(folder / "tensorboard"))
    try:
        for data in runs:
            fig = figure(data)
            fig.set_dpi(dpi)
            fig.canvas.draw()
            pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3]
            plt.close(fig)
            path = folder / f"{data['family']}_{data['parametrization']}_{data['axis']}.png"
            # 256 colours: a third of the bytes, no visible change (the figures are committed)
            Image.fromarray(pixels).quantize(256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
            paths.append(path)
            tag = f"coord_check/{data['axis']}/{data['family']}/{data['parametrization']}"
            writer.add_image(tag, pixels, 0, dataformats="HWC")
        writer.add_text("coord_check/slopes", table_md, 0)
    finally:
        writer.close()
    return paths


def targets(runs: list[dict], tolerance: float) -> list[Target]:
    """Per family: µP and CompleteP flat (their largest failing slope, or 0), SP's logits and µP's last block grow."""
    found = []
    for data in runs:
        family, p, axis = data["family"], data["parametrization"], data["axis"]
        if (axis, p) in (("width", "mup"), ("depth", "completep")):
            failed = not_flat(data, tolerance)
            name, value = _worst(failed) if failed else ("every quantity", 0.0)
            detail = f"largest slope outside ±{tolerance:g}: {name}" if failed else "all within"
            found.append(Target(f"{family} {p}: flat over {axis}", abs(value), tolerance, False, detail))
        elif (axis, p) == ("width", "sp"):
            value = slopes(data)["logits"]
            found.append(Target(f"{family} sp: output logits grow with width", value, tolerance, detail="slope"))
        elif (axis, p) == ("depth", "mup"):
            last = {k: v for k, v in slopes(data).items() if k.endswith("block[last]")}
            name, value = max(last.items(), key=lambda kv: kv[1], default=("—", math.nan))
            found.append(Target(f"{family} mup: the residual stream grows with depth", value, tolerance,
                                detail=f"slope of {name}"))  # fmt: skip
    return found


def run(ctx: Context) -> Section:
    s = ctx.settings
    section = Section("coord_check", "Coordinate check: activation size against width (µP) and depth (CompleteP)")
    runs = measure_all(s)
    tables = [summary_table(runs, axis, s.coord_tolerance) for axis in ("width", "depth")]
    section.tables += tables
    section.targets += targets(runs, s.coord_tolerance)
    section.notes += [
        f"Widths {', '.join(map(str, s.coord_widths))} at {s.coord_depth} blocks (base width {min(s.coord_widths)}); "
        f"depths {', '.join(map(str, s.coord_depths))} at width {s.coord_depth_width} (base depth "
        f"{min(s.coord_depths)}); {s.coord_heads} heads (d_head grows with width); {s.coord_steps} steps of the "
        f"suite's AdamW at lr {s.coord_lr:g} (no warm-up, no weight decay; µP's per-group lr apply) on one random "
        f"batch of {s.coord_batch} × {s.coord_seq_len} tokens (ViT: {s.coord_batch} Gaussian images); "
        f"{s.coord_seeds} seeds averaged. The data are synthetic: the check measures scaling, not learning.",
        "Under µP the attention logits start at O(1/√d_head) (no zero-initialised query) and shrink with width; "
        "the check fails them only for growing.",
    ]
    if ctx.out is None:
        section.notes.append("No results folder: no figures written.")
    else:
        folder = ctx.out / ("coord_check-smoke" if s.smoke else "coord_check")
        paths = write_outputs(runs, "\n\n".join(t.markdown() for t in tables), folder)
        section.notes.append(
            f"Figures ({len(paths)} PNGs), every quantity's slope (`slopes.md`), the numbers (`coord_check.json`) and "
            f"TensorBoard (`tensorboard/`) in `{folder.name}/` beside this report."
        )
    section.data = {
        "tolerance": s.coord_tolerance,
        "slopes": [
            {key: data[key] for key in ("family", "parametrization", "axis", "sizes")}
            | {"init": slopes(data, 0), "last": slopes(data), "delta": slopes(data, kind="delta")}
            for data in runs
        ],
    }
    return section
