"""The coordinate check (`experiments/bench/coord_data.py`, the bench section `coord_check`): µP keeps every
layer's activations, the attention logits and the output logits the same size as width grows, where SP's output
logits grow; CompleteP keeps the residual stream the same size as depth grows, where µP's grows.

TOLERANCE: a quantity is flat when the slope of log RMS against log width (or depth) after `STEPS` Adam steps is
within ±0.3, i.e. it changes by at most 8^0.3 ≈ 1.9× over the 8× range of widths 64–512. µP leaves only
finite-width drift, negative (the narrowest model moves a little more per step): measured |slope| ≤ 0.20 for every
layer and ≤ 0.09 for the logits of GPT and ViT at these settings, and −0.13 to −0.34 for the attention logits,
which the check fails only for growing (`not_flat`). SP's output logits grow as width^0.7–0.8 and its attention
and FFN outputs as width^1.5–2.3: Adam moves each weight by ≈ lr whatever the width, and a layer sums d such moves
coherently. Over depth (2–16 blocks at width 64) µP's last block output grows as depth^1.05 and CompleteP's as
depth^−0.04. The learning rate, 3e-3, is large enough for SP's growth to show from the first step; at 1e-2 the
narrowest µP models leave the linear regime (slopes down to −0.4 at widths 32–256).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from experiments.bench import coord_check
from experiments.bench.common import SMOKE, Context
from experiments.bench.coord_data import (
    DEPTH_CHECKED,
    FAMILIES,
    Recorder,
    Shape,
    arch,
    build,
    coord_data,
    depth_alias,
    not_flat,
    slope,
    slopes,
)

TOLERANCE = 0.3
STEPS, SEEDS, LR = 5, 3, 3e-3
WIDTHS = (64, 128, 256, 512)
SHAPE = Shape(seq_len=16, batch_size=4)


def width_check(family: str, parametrization: str) -> dict:
    return coord_data(family, parametrization, WIDTHS, [2], seeds=SEEDS, steps=STEPS, lr=LR, shape=SHAPE)


@pytest.mark.parametrize("family", ["gpt", "vit"])
def test_mup_is_flat_over_width_where_sp_logits_grow(family):
    """The acceptance test: the check fails for SP's output logits and passes for µP, on the RMS of each quantity
    after STEPS steps and on the RMS of its change since init (µP's maximal update)."""
    sp, mup = width_check(family, "sp"), width_check(family, "mup")
    for kind in ("rms", "delta"):
        sp_failed = not_flat(sp, TOLERANCE, kind=kind)
        assert "logits" in sp_failed and sp_failed["logits"] > 2 * TOLERANCE, (kind, slopes(sp, kind=kind))
        assert not_flat(mup, TOLERANCE, kind=kind) == {}, (kind, slopes(mup, kind=kind))
    # SP's sublayers grow faster still; µP checks every block, sublayer and attention logit
    sublayers = {k: v for k, v in slopes(sp).items() if k.endswith((".attn", ".ffn"))}
    assert min(sublayers.values()) > 1.0, sublayers
    assert {"embed", "block0", "block1.attn", "block1.ffn", "block1.attn.logits", "logits"} <= set(slopes(mup))


def test_completep_is_flat_over_depth_where_mup_residual_grows():
    depths = (2, 4, 8, 16)
    mup, completep = (
        coord_data("gpt", p, [64], depths, seeds=2, steps=STEPS, lr=LR, shape=SHAPE) for p in ("mup", "completep")
    )
    assert not_flat(completep, TOLERANCE) == {}, slopes(completep)
    assert not_flat(mup, TOLERANCE).get("block[last]", 0.0) > 2 * TOLERANCE, slopes(mup)
    assert {"embed", "block[first]", "block[last]", "block[last].attn.logits", "logits"} <= set(slopes(mup))


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_records_every_layer_at_every_step(family):
    tiny = Shape(vocab_size=32, seq_len=8, batch_size=2, n_heads=2, image_size=8)
    data = coord_data(family, "mup", [16, 32], [2], seeds=1, steps=2, lr=1e-2, shape=tiny)
    names = set(data["quantities"])
    stacks = ("encoder.", "decoder.") if family == "translation" else ("",)
    for stack in stacks:
        assert {f"{stack}embed", f"{stack}block1", f"{stack}block1.attn", f"{stack}block1.ffn"} <= names
        assert f"{stack}block0.attn.logits" in names
    if family == "translation":
        assert {"decoder.block0.cross", "decoder.block0.cross.logits"} <= names
    assert "logits" in names
    for q in data["quantities"].values():
        assert [len(per_size) for per_size in q["rms"]] == [3, 3]  # steps 0, 1, 2 at each width
        assert all(per_size[0] == 0.0 for per_size in q["delta"])  # no change at init
        assert all(v > 0 and math.isfinite(v) for per_size in q["rms"] for v in per_size)
    # the training moved the model: the logits changed after the first step
    assert all(per_size[1] > 0 for per_size in data["quantities"]["logits"]["delta"])


def test_recorder_sees_the_forward_without_changing_it():
    cfg = arch("mup", 32, 2, Shape(), base_width=16, base_depth=2)
    model, inputs, _ = build("gpt", cfg, Shape(seq_len=8, batch_size=2), seed=0)
    expected = model(*inputs)
    attn = model.stack.blocks[0].attn
    seen = []
    attn.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    with Recorder(model) as recorder:
        logits = model(*inputs)
    torch.testing.assert_close(logits, expected, rtol=0, atol=0)
    torch.testing.assert_close(recorder.values["logits"], expected.detach())
    # the attention logits are q·k·scale over every pair, with µP's √base_head_dim/d_head (base head width 16/4)
    B, H, T, d_head = 2, 4, 8, 8
    q, k, _ = attn.qkv(seen[-1]).detach().split(32, dim=-1)
    q, k = (t.view(B, T, H, d_head).transpose(1, 2) for t in (q, k))
    torch.testing.assert_close(recorder.values["block0.attn.logits"], (q @ k.transpose(-2, -1)) * 2 / d_head)
    assert all(m.probe is None for m in model.modules() if hasattr(m, "probe"))
    assert not model._forward_hooks and not model.stack._forward_pre_hooks and not attn._forward_hooks


def test_slopes_and_what_fails():
    assert slope([1, 2, 4, 8], [3 * s**0.5 for s in (1, 2, 4, 8)]) == pytest.approx(0.5)
    assert math.isnan(slope([1, 2], [1.0, 0.0]))
    sizes = [1, 2, 4]

    def data(axis: str, exponents: dict[str, float]) -> dict:
        quantities = {n: {"rms": [[1.0, s**e] for s in sizes], "delta": [[0.0, s**e] for s in sizes]}
                      for n, e in exponents.items()}  # fmt: skip
        return {"axis": axis, "sizes": sizes, "steps": 1, "quantities": quantities}

    width = data("width", {"embed": 0.1, "block0": -0.5, "block0.attn.logits": -0.5, "logits": 0.4})
    assert not_flat(width, 0.3) == pytest.approx({"block0": -0.5, "logits": 0.4})  # attention logits may shrink
    assert not_flat(width, 0.3, step=0) == {}
    assert not_flat(data("width", {"block0.attn.logits": 0.5}), 0.3) == pytest.approx({"block0.attn.logits": 0.5})
    depth = data("depth", {"block[first]": -0.6, "block[first].ffn": 0.9, "block[last]": 0.2, "logits": 0.0})
    assert not_flat(depth, 0.3) == {}  # the first block and the sublayers are not checked over depth
    assert [depth_alias(n, 4) for n in ("embed", "block0.ffn", "block2", "decoder.block3.cross.logits")] == [
        "embed", "block[first].ffn", None, "decoder.block[last].cross.logits"
    ]  # fmt: skip


def test_section_writes_figures_numbers_and_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    settings = dataclasses.replace(SMOKE, coord_families=("gpt", "vit"))
    section = coord_check.run(Context(settings, peak_flops=1.0, out=tmp_path))
    folder = tmp_path / "coord_check-smoke"
    pngs = {p.name for p in folder.glob("*.png")}
    assert pngs == {f"{f}_{p}_{a}.png" for f in ("gpt", "vit") for a, ps in (("width", ("sp", "mup")),
                    ("depth", ("mup", "completep"))) for p in ps}  # fmt: skip
    runs = json.loads((folder / "coord_check.json").read_text())
    assert [(r["family"], r["parametrization"], r["axis"]) for r in runs][:4] == [
        ("gpt", "sp", "width"), ("gpt", "mup", "width"), ("gpt", "mup", "depth"), ("gpt", "completep", "depth")
    ]  # fmt: skip
    assert "| logits |" in (folder / "slopes.md").read_text()
    events = EventAccumulator(str(folder / "tensorboard"), size_guidance={"images": 0}).Reload()
    assert "coord_check/width/gpt/sp" in events.Tags()["images"]
    assert len(events.Tags()["images"]) == 8
    assert [t.title for t in section.tables][0].startswith("Slope of log RMS against log width")
    assert {t.name for t in section.targets} >= {"gpt sp: output logits grow with width", "vit mup: flat over width"}


def test_readme_quotes_the_committed_results():
    """The README's coordinate-check figures are the committed run's (`experiments/bench/results/coord_check/`)."""
    root = Path(__file__).resolve().parents[3]
    runs = json.loads((root / "experiments/bench/results/coord_check/coord_check/coord_check.json").read_text())
    readme = " ".join((root / "README.md").read_text(encoding="utf-8").split())
    found = {(r["family"], r["parametrization"], r["axis"]): slopes(r) for r in runs}

    def pick(parametrization: str, axis: str, keep, families=FAMILIES) -> list[float]:
        return [v for f in families for k, v in found[f, parametrization, axis].items() if keep(k)]

    def num(x: float, digits: int = 2) -> str:
        return f"{x:.{digits}f}".replace("-", "−")

    attention = lambda k: k.endswith(".logits")  # noqa: E731
    sp_logits = pick("sp", "width", lambda k: k == "logits")
    sublayers = pick("sp", "width", lambda k: k.endswith((".attn", ".ffn", ".cross")))
    mup_layers = pick("mup", "width", lambda k: k != "logits" and not attention(k))
    mup_logits = pick("mup", "width", lambda k: k == "logits")
    mup_attention = pick("mup", "width", attention)
    mup_depth = pick("mup", "depth", lambda k: k.endswith("block[last]"))
    completep = pick("completep", "depth", DEPTH_CHECKED.search, ("gpt", "bert", "vit"))
    quotes = [
        f"width^{num(min(sp_logits))}–{num(max(sp_logits))}",
        f"width^{num(min(sublayers), 1)}–{num(max(sublayers), 1)}",
        f"within ±{num(max(map(abs, mup_layers)))}",
        f"between {num(min(mup_logits))} and {num(max(mup_logits))}",
        f"({num(max(mup_attention), 1)} to {num(min(mup_attention), 1)}",
        f"depth^{num(min(mup_depth), 1)}–{num(max(mup_depth), 1)}",
        f"within ±{num(max(map(abs, completep)))} for GPT, BERT and ViT",
        f"depth^{num(found['translation', 'completep', 'depth']['encoder.block[last]'])} ",
        f"decoder's as depth^{num(found['translation', 'completep', 'depth']['decoder.block[last]'])} ",
    ]
    for quote in quotes:
        assert quote in readme, quote
