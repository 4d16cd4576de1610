"""Every figure a study README quotes and test_readme_quotes.py or readme_positional_figures.py declares is
recomputed from the committed ledger it came from (`results/<spec>/results.csv`, or a measurement's file
beside it) and must appear in the README as quoted, so a README cannot drift from its ledger. Each study's
function returns the README's text spelled from the ledger (`experiments.studies.ledger_figures`); line
breaks and bold are ignored when matching. A README edit that changes a quoted figure fails here until the
figure is the ledger's again. Here: the architecture studies (ffn_norm, depth_split, norm_placement) and
the studies index; the positional-encoding studies' figures are in readme_positional_figures.py. Tables
and verdicts that scripts write are checked in test_readme_script_outputs.py.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest

from experiments.studies import ledger_figures as fig
from tests.experiments.studies.readme_figures import ROOT, below, normalized, results
from tests.experiments.studies.readme_positional_figures import (
    extrapolation,
    length_generalization,
    scan_length,
    vit_positional,
)


def ffn_norm() -> list[str]:
    long, short = results("ffn_norm", "ffn_norm_2k"), results("ffn_norm", "ffn_norm")
    d_ff = {"relu": 512, "gelu": 512, "swiglu": 341, "geglu": 341}
    shazeer = {"relu": "1.997", "gelu": "1.983", "swiglu": "1.944", "geglu": "1.942"}

    def cell(sweep: Path, act: str, norm: str) -> dict[int, float]:
        name = f"activation={act},norm={norm}" + (f",d_ff={d_ff[act]}" if sweep == long else "")
        return fig.seeds(sweep, name, "val/loss")

    def pairs(sweep: Path, acts: tuple[str, ...], reference: str) -> list[float]:
        return [
            d
            for a in acts
            for n in ("layernorm", "rmsnorm")
            for d in fig.by_seed(cell(sweep, a, n), cell(sweep, reference, n))
        ]

    def means(sweep: Path, acts: tuple[str, ...], reference: str) -> list[float]:
        return [
            fig.paired(cell(sweep, a, n), cell(sweep, reference, n)).diff
            for a in acts
            for n in ("layernorm", "rmsnorm")
        ]

    glu = ("swiglu", "geglu")
    norms = {a: fig.paired(cell(long, a, "rmsnorm"), cell(long, a, "layernorm"), margin=0.01) for a in d_ff}
    glu_relu = {
        (a, n): fig.paired(cell(long, a, n), cell(long, "relu", n)) for a in glu for n in ("layernorm", "rmsnorm")
    }
    gelu_relu = [fig.paired(cell(long, "gelu", n), cell(long, "relu", n)) for n in ("layernorm", "rmsnorm")]
    glu_gelu_p = [
        fig.paired(cell(long, a, n), cell(long, "gelu", n)).p_value for a in glu for n in ("layernorm", "rmsnorm")
    ]

    def main_row(act: str) -> str:
        c = norms[act]
        shown = "equivalent" if c.equivalent else "not shown"
        return (f"| {act} ({d_ff[act]}) | {fig.mean_std(cell(long, act, 'layernorm'))} | "
                f"{fig.mean_std(cell(long, act, 'rmsnorm'))} | {fig.difference(c)} | "
                f"p = {c.equivalence_p:#.2g}, {shown} | {shazeer[act]} |")  # fmt: skip

    def short_pair(a: str, b: str, norm_a: str, norm_b: str) -> str:
        first, second = cell(short, a, norm_a), cell(short, b, norm_b)
        c = fig.paired(first, second)
        return (
            f"| {fig.listed(fig.by_seed(first, second), 4, sign=True)} | {fig.signed(c.diff, 4)} | "
            f"{fig.interval(c, 4)} | {c.p_value:#.2g} |"
        )

    def s(c) -> str:  # `−0.024 [−0.039, −0.010]`
        return fig.difference(c)

    speed = (results("ffn_norm", "ffn_norm") / "norm_speed.md").read_text()
    load = [
        f"{float(v):.1f}" for v in re.search(r"load average at start \(([\d.]+), ([\d.]+), ([\d.]+)\)", speed).groups()
    ]
    sw_ln, sw_rms = glu_relu["swiglu", "layernorm"], glu_relu["swiglu", "rmsnorm"]
    ge_ln, ge_rms = glu_relu["geglu", "layernorm"], glu_relu["geglu", "rmsnorm"]
    return [
        # verdict
        f"by {fig.span([-d for d in pairs(long, glu, 'gelu')])} nats per seed and "
        f"{fig.span([-d for d in means(long, glu, 'gelu')])} on average "
        f"(p = {min(glu_gelu_p):.2g}–{max(glu_gelu_p):.1g})",
        f"the GLUs beat ReLU in all 12 seed pairs (by {fig.span([-d for d in pairs(long, glu, 'relu')])} "
        "nats per seed)",
        f"but on average by only {fig.span([-d for d in means(long, glu, 'relu')])} (paper: 0.053–0.055)",
        f"GEGLU under both norms ({s(ge_ln)} and {s(ge_rms)}",
        f"SwiGLU under RMSNorm ({s(sw_rms)}, p = {sw_rms.p_value:.2g}",
        f"SwiGLU under LayerNorm ({s(sw_ln)}, p = {sw_ln.p_value:.2f})",
        f"GELU trails ReLU ({fig.signed(gelu_relu[0].diff)} / {fig.signed(gelu_relu[1].diff)}, "
        f"p = {gelu_relu[0].p_value:.2g} under each norm",
        f"for SwiGLU (TOST p = {norms['swiglu'].equivalence_p:.1g}) and GEGLU (p = {norms['geglu'].equivalence_p:.1g}; "
        f"RMSNorm is {fig.number(norms['geglu'].diff)} worse in every seed, p = {norms['geglu'].p_value:.2g}",
        f"not shown for ReLU (TOST p = {norms['relu'].equivalence_p:.1g}) or GELU "
        f"(p = {norms['gelu'].equivalence_p:.2f})",
        # the 2,000-step table
        *(main_row(act) for act in d_ff),
        # 300 steps
        *(f"| {a} " + short_pair(a, a, "rmsnorm", "layernorm") for a in d_ff),
        *(
            f"| {name} − GELU, {title} " + short_pair(a, "gelu", norm, norm)
            for a, name in (("swiglu", "SwiGLU"), ("geglu", "GEGLU"))
            for norm, title in (("layernorm", "LayerNorm"), ("rmsnorm", "RMSNorm"))
        ),
        f"norms: at 300 steps {fig.span([-d for d in pairs(short, glu, 'gelu')])} nats per seed (means "
        f"{fig.span([-d for d in means(short, glu, 'gelu')])}) with 8% more parameters, and at 2,000 steps "
        f"{fig.span([-d for d in pairs(long, glu, 'gelu')])} "
        f"(means {fig.span([-d for d in means(long, glu, 'gelu')])}) with none",
        # the speed measurement's machine
        f"records load averages of {load[0]}, {load[1]} and {load[2]} (1, 5 and 15 minutes) at the start",
    ]


def depth_split() -> list[str]:
    sweep = results("depth_split", "depth_split")
    exact = {c: fig.seeds(sweep, c, "val/exact_match") for c in ("3-3", "5-1", "1-5")}
    token = {c: fig.seeds(sweep, c, "val/token_acc") for c in exact}
    params = {c: int(fig.seeds(sweep, c, "params")[0]) for c in exact}
    deep, shallow = fig.paired(exact["5-1"], exact["3-3"]), fig.paired(exact["1-5"], exact["3-3"])
    speed = (sweep / "decode_speed.md").read_text()
    timed = {
        row[0]: [v.split(" (")[0] for v in row[1:6]]
        for line in speed.splitlines()
        if line.startswith("| ") and (row := line[2:-2].split(" | "))[0] in exact
    }
    load = re.search(r"load average at the end (\d+\.\d+), (\d+\.\d+), (\d+\.\d+)", speed).groups()

    def row(c: str) -> str:
        vs = fig.paired(exact[c], exact["3-3"])
        change = "baseline" if c == "3-3" else f"{fig.difference(vs)}, p = {vs.p_value:.2g}"
        _, greedy, beam, up_greedy, up_beam = timed[c]
        return (
            f"| {c} | {params[c]:,} | {fig.mean_std(exact[c])} | {change} | {fig.mean_std(token[c])} | "
            f"{greedy} | {beam} | {up_greedy} / {up_beam} |"
        )

    def pct(values: dict[int, float]) -> str:
        return f"{fig.number(statistics.mean(values.values()) * 100, 1)}%"

    return [
        f"5-1 {pct(exact['5-1'])} against {pct(exact['3-3'])} for 3-3: {fig.signed(deep.diff * 100, 1)} points, paired "
        f"95% CI {fig.interval(deep, 1, 100)}, p = {deep.p_value:.2g}, 3 seeds",
        f"1-5 is not distinguishable from 3-3 ({pct(exact['1-5'])}, {fig.signed(shallow.diff * 100, 1)} points "
        f"{fig.interval(shallow, 1, 100)}, p = {shallow.p_value:.2g}): a "
        f"±{(shallow.ci_high - shallow.ci_low) * 50:.0f}-point interval",
        f"`decode_speed.md` records load averages of {', '.join(f'{float(v):.1f}' for v in load[:2])} and "
        f"{float(load[2]):.1f} over 1, 5 and 15 minutes at the end",
        *(row(c) for c in exact),
        f"exact match {fig.mean(exact['5-1'])} vs {fig.mean(exact['3-3'])}, {fig.difference(deep)}",
        f"(token accuracy {fig.mean(token['5-1'], 2)} against {fig.mean(token['3-3'], 2)}), and its seeds disagree "
        f"widely ({', '.join(f'{v * 100:.1f}%' for v in sorted(exact['5-1'].values()))})",  # smallest first
    ]


def norm_placement() -> list[str]:
    sweep = results("norm_placement", "norm_placement")

    def cell(placement: str, warmup: int, lr: str) -> dict[int, float]:
        return fig.seeds(sweep, f"L6-{placement}-warmup{warmup}-lr{lr}", "val/loss")

    pre = {(w, lr): cell("pre", w, lr) for w in (0, 200) for lr in ("0.001", "0.003")}
    post = {(w, lr): cell("post", w, lr) for w, lr in ((200, "0.001"), (200, "0.003"), (0, "0.003"))}
    gain = {lr: fig.paired(pre[0, lr], pre[200, lr]) for lr in ("0.001", "0.003")}
    placed = {lr: fig.paired(pre[200, lr], post[200, lr]) for lr in ("0.001", "0.003")}
    no_warmup = {lr: fig.paired(pre[0, lr], post[200, lr]) for lr in ("0.001", "0.003")}
    post_gain = fig.paired(post[0, "0.003"], post[200, "0.003"])
    survivor = fig.by_seed(fig.seeds(sweep, "L6-post-warmup0-lr0.001", "val/loss"), post[200, "0.001"])
    return [
        f"at lr 3e-3 ({fig.mean(pre[0, '0.003'])} → {fig.mean(pre[200, '0.003'])}, {fig.difference(gain['0.003'])}, "
        f"p = {gain['0.003'].p_value:.1g})",
        f"at 1e-3 ({fig.mean(pre[0, '0.001'])} → {fig.mean(pre[200, '0.001'])}, {fig.difference(gain['0.001'])}, "
        f"p = {gain['0.001'].p_value:.1g})",
        f"Post-Norm is behind Pre-Norm at 1e-3 (Pre − Post {fig.signed(placed['0.001'].diff)}, "
        f"p = {placed['0.001'].p_value:.1g})",
        f"(Pre − Post {fig.difference(placed['0.003'])}, p = {placed['0.003'].p_value:.1g}:",
        f"Pre-LN +{gain['0.001'].diff:.3f} {fig.interval(gain['0.001'])} (p = {gain['0.001'].p_value:.1g}) at 1e-3 and "
        f"{fig.difference(gain['0.003'])} (p = {gain['0.003'].p_value:.1g}) at 3e-3; Post-LN "
        f"{fig.signed(post_gain.diff)} at 3e-3 ({below(post_gain.p_value)})",
        f"one surviving seed ({fig.signed(survivor[0])}; two diverged)",
        f"at 1e-3 ({fig.difference(no_warmup['0.001'])}, p = {no_warmup['0.001'].p_value:.2f}; inconclusive",
        f"the ±{(no_warmup['0.001'].ci_high - no_warmup['0.001'].ci_low) / 2:.2f} interval",
        f"{fig.signed(no_warmup['0.003'].diff)} behind at 3e-3 ({fig.interval(no_warmup['0.003'])}, "
        f"p = {no_warmup['0.003'].p_value:.1g})",
    ]


def index() -> list[str]:
    """The studies index (experiments/README.md) repeats some of the studies' figures in its rows."""
    deep = results("length_generalization", "length_generalization_deep")
    ood = {s: fig.seeds(deep, f"pos_encoding={s}", "val/exact_match_ood") for s in ("none", "t5", "alibi")}
    np_ = results("norm_placement", "norm_placement")
    pre0, pre200 = (fig.seeds(np_, f"L6-pre-warmup{w}-lr0.003", "val/loss") for w in (0, 200))
    post200 = fig.seeds(np_, "L6-post-warmup200-lr0.003", "val/loss")
    placed = fig.paired(pre200, post200)
    ffn = results("ffn_norm", "ffn_norm_2k")
    d_ff = {"relu": 512, "gelu": 512, "swiglu": 341, "geglu": 341}

    def ffn_cell(act: str, norm: str) -> dict[int, float]:
        return fig.seeds(ffn, f"activation={act},norm={norm},d_ff={d_ff[act]}", "val/loss")

    glu_gelu = [(ffn_cell(a, n), ffn_cell("gelu", n)) for a in ("swiglu", "geglu") for n in ("layernorm", "rmsnorm")]
    glu_relu = [
        fig.paired(ffn_cell(a, n), ffn_cell("relu", n)) for a in ("swiglu", "geglu") for n in ("layernorm", "rmsnorm")
    ]
    vit = results("vit_positional", "vit_positional_equivalence")
    tost = fig.paired(*(fig.seeds(vit, f"pos_encoding={s}", "val/acc") for s in ("sinusoidal", "learned")), margin=0.02)
    ds = results("depth_split", "depth_split")
    exact = {c: fig.seeds(ds, c, "val/exact_match") for c in ("3-3", "5-1", "1-5")}
    deep_split, shallow = fig.paired(exact["5-1"], exact["3-3"]), fig.paired(exact["1-5"], exact["3-3"])
    ex = results("extrapolation", "extrapolation_long"), results("extrapolation", "extrapolation_t5_distance")
    t5_rope = fig.paired(
        fig.seeds(ex[1], "t5_max_distance=32", "val/loss@512"), fig.seeds(ex[0], "pos_encoding=rope", "val/loss@512")
    )

    def negated_span(values: list[float]) -> str:
        low, high = sorted(values)[0], sorted(values)[-1]
        return f"{fig.signed(high)} to {fig.signed(low)}"

    return [
        f"T5 − RoPE at 8× {fig.signed(t5_rope.diff)}, p = {t5_rope.p_value:.2g}",
        f"({fig.mean(pre0)} → {fig.mean(pre200)}, p = {fig.paired(pre0, pre200).p_value:.1g};",
        f"Pre- vs Post-Norm at 3e-3 inconclusive ({fig.difference(placed)}, p = {placed.p_value:.1g})",
        f"far behind NoPE (p = {fig.paired(ood['none'], ood['t5']).p_value:.2g})",
        f"(ALiBi − NoPE {fig.difference(fig.paired(ood['alibi'], ood['none']), 2)}:",
        f"means {negated_span([fig.paired(a, b).diff for a, b in glu_gelu])} nats, every seed "
        f"{negated_span([d for a, b in glu_gelu for d in fig.by_seed(a, b)])}",
        f"but means only {negated_span([c.diff for c in glu_relu])} (paper −0.054)",
        f"SwiGLU with RMSNorm ({fig.difference(glu_relu[1])}, p = {glu_relu[1].p_value:.2g})",
        f"SwiGLU with LayerNorm (p = {glu_relu[0].p_value:.2f})",
        f"TOST p = {tost.equivalence_p:.2g})",
        f"5-1 is far lower ({fig.mean([v * 100 for v in exact['5-1'].values()], 1)}%, "
        f"p = {deep_split.p_value:.2g}, 3 seeds)",
        f"(3-3 at {fig.mean([v * 100 for v in exact['3-3'].values()], 1)}% exact match",
        f"not distinguishable from 3-3 ({fig.signed(shallow.diff * 100, 1)} points {fig.interval(shallow, 1, 100)}, "
        f"p = {shallow.p_value:.2g})",
    ]


# README (from the repository root) -> the figures it quotes, spelled from the ledgers
QUOTES = {
    "experiments/README.md": index,
    **{
        f"experiments/studies/{study.__name__}/README.md": study
        for study in (depth_split, extrapolation, ffn_norm, length_generalization, norm_placement, scan_length)
    },
    "experiments/studies/vit_positional/README.md": vit_positional,
}


@pytest.mark.parametrize("readme", sorted(QUOTES), ids=lambda r: Path(r).parent.name)
def test_readme_quotes_its_ledger(readme):
    text = normalized((ROOT / readme).read_text())
    missing = [quote for quote in QUOTES[readme]() if normalized(quote) not in text]
    assert not missing, f"{readme} does not quote its ledger as:\n" + "\n".join(missing)
