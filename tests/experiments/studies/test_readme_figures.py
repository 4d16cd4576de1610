"""Every figure a study README quotes and this file declares is recomputed from the committed ledger it
came from (`results/<spec>/results.csv`, or a table script's output) and must appear in the README as
quoted, so a README cannot drift from its ledger. Each study's function returns the README's text
spelled from the ledger (`experiments.studies.ledger_figures`); line breaks and bold are ignored when
matching. A README edit that changes a quoted figure fails here until the figure is the ledger's again.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest

from experiments.studies import ledger_figures as fig
from experiments.studies.dyt import verdict as dyt_verdict
from experiments.studies.extrapolation import ladder_verdict as extrapolation_ladder_verdict
from experiments.studies.ffn_norm import ladder_verdict as ffn_ladder_verdict
from experiments.studies.ffn_norm import pair_table
from experiments.studies.mlm_positional import tuned_verdict as mlm_verdict
from experiments.studies.norm_placement import loss_table
from experiments.studies.norm_placement import tuned_verdict as norm_verdict
from experiments.studies.peft import tuned_verdict as peft_verdict
from experiments.studies.peri_ln import verdict as peri_ln_verdict
from experiments.studies.scan_length import split_table
from experiments.studies.scan_length import tuned_verdict as scan_verdict
from experiments.studies.stability import verdict as stability_verdict

ROOT = Path(__file__).resolve().parents[3]
STUDIES = ROOT / "experiments" / "studies"


def results(study: str, spec: str) -> Path:
    return STUDIES / study / "results" / spec


def normalized(text: str) -> str:
    """Markdown as it reads: bold markers dropped, every run of whitespace (a wrapped line) one space."""
    return " ".join(text.replace("**", "").split())


def below(p: float, bound: float = 0.001) -> str:
    """`p < 0.001` where the README says so, and the p-value itself (which then fails) where it is not."""
    return f"p < {bound:g}" if p < bound else f"p = {p:.2g}"


def scientific(p: float) -> str:
    """`9e-6`: one significant digit."""
    mantissa, exponent = f"{p:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def length_generalization() -> list[str]:
    deep = results("length_generalization", "length_generalization_deep")
    buckets = results("length_generalization", "length_generalization_t5_buckets")
    ood, ind = "val/exact_match_ood", "val/exact_match_id"

    def scheme(sweep: Path, cell: str, metric: str = ood) -> dict[int, float]:
        return fig.seeds(sweep, cell, metric)

    none, t5, alibi = (scheme(deep, f"pos_encoding={s}") for s in ("none", "t5", "alibi"))
    rope, sinusoidal = (scheme(deep, f"pos_encoding={s}") for s in ("rope", "sinusoidal"))
    rerun, saturating = scheme(buckets, "none"), scheme(buckets, "t5_saturating")
    none_sin, none_t5, alibi_none = fig.paired(none, sinusoidal), fig.paired(none, t5), fig.paired(alibi, none)
    rerun_sat, sat_default = fig.paired(rerun, saturating), fig.paired(saturating, t5)
    sat_rerun = fig.paired(saturating, rerun)

    def lengths(sweep: Path, cell: str, at: tuple[int, ...], sep: str) -> str:
        return sep.join(fig.median(scheme(sweep, cell, f"val/exact_match@{n}")) for n in at)

    def deep_row(label: str, name: str) -> str:
        cell = f"pos_encoding={name}"
        return (f"| {label} | {fig.median(scheme(deep, cell, ind))} | {fig.mean_std(scheme(deep, cell), 2)} | "
                f"{lengths(deep, cell, (11, 12, 13, 14), ' | ')} |")  # fmt: skip

    def followup_row(label: str, sweep: Path, cell: str, values: dict[int, float]) -> str:
        return (f"| {label} | {fig.median(scheme(sweep, cell, ind))} | {fig.mean_std(values, 2)} | "
                f"{fig.listed(values, 2)} | {lengths(sweep, cell, (11, 12), ' / ')} |")  # fmt: skip

    return [
        # verdict
        f"NoPE {fig.mean(none, 2)} against RoPE {fig.mean(rope, 2)} and sinusoidal {fig.mean(sinusoidal, 3)}",
        f"NoPE − sinusoidal {fig.difference(none_sin, 2)}, p = {none_sin.p_value:.3f}",
        f"NoPE − T5 {fig.difference(none_t5, 2)}, p = {none_t5.p_value:.2g}",
        f"ALiBi ({fig.mean(alibi, 2)}) is not shown behind NoPE (ALiBi − NoPE {fig.difference(alibi_none, 2)}, "
        f"p = {alibi_none.p_value:.2f})",
        f"reaches {fig.mean(saturating, 2)} out of distribution",
        f"({fig.signed(sat_rerun.diff, 2)} [{fig.signed(sat_rerun.ci_low, 2)}, {fig.signed(sat_rerun.ci_high, 3)}], "
        f"p = {sat_rerun.p_value:.2g})",
        # the 4-layer table and its seeds
        deep_row("none (NoPE)", "none"),
        deep_row("t5", "t5"),
        deep_row("alibi", "alibi"),
        deep_row("rope", "rope"),
        deep_row("sinusoidal", "sinusoidal"),
        f"NoPE {fig.listed(none, 2)}; ALiBi {fig.listed(alibi, 2)}; T5 {fig.listed(t5, 2)}",
        # the follow-up
        followup_row("none (re-run)", buckets, "none", rerun),
        followup_row("t5, saturating buckets (16, max_distance 12)", buckets, "t5_saturating", saturating),
        followup_row("t5, default buckets (4-layer table above)", deep, "pos_encoding=t5", t5),
        f"NoPE − saturating T5 {fig.difference(rerun_sat)}, p = {rerun_sat.p_value:.2g}",
        f"saturating − default T5 {fig.difference(sat_default)}, p = {sat_default.p_value:.2f}",
        f"(seed 2: {fig.number(none[2])} → {fig.number(rerun[2])}), mean {fig.mean(none, 2)} → {fig.mean(rerun, 2)}",
    ]


def scan_length() -> list[str]:
    base, t5_lr = results("scan_length", "scan_length"), results("scan_length", "scan_length_t5_lr")
    exact = "val/exact_match"

    def cell(sweep: Path, split: str, scheme: str, metric: str = exact) -> dict[int, float]:
        return fig.seeds(sweep, f"split={split},pos_encoding={scheme}", metric)

    def points(values: dict[int, float]) -> str:
        return ", ".join(f"{v * 100:.1f}" for v in values.values())

    rope_learned = {split: fig.paired(cell(base, split, "rope"), cell(base, split, "learned"))
                    for split in ("simple", "length", "cutoff26")}  # fmt: skip
    cut = {s: fig.paired(cell(base, "cutoff26", "rope"), cell(base, "cutoff26", s)) for s in ("sinusoidal", "t5")}
    lead = fig.by_seed(cell(base, "cutoff26", "rope"), cell(base, "cutoff26", "learned"))
    tuned = {split: cell(t5_lr, split, "t5") for split in ("simple", "length", "cutoff26")}
    gain = {split: fig.paired(tuned[split], cell(base, split, "t5")) for split in tuned}
    per_seed_gain = fig.by_seed(tuned["simple"], cell(base, "simple", "t5"))
    c = rope_learned["cutoff26"]
    return [
        # verdict
        f"RoPE − learned +{c.diff * 100:.1f} points {fig.interval(c, 1, 100)}, p = {c.p_value:.1g}",
        f"+{rope_learned['length'].diff * 100:.1f} {fig.interval(rope_learned['length'], 1, 100)}, "
        f"p = {rope_learned['length'].p_value:.2g}",
        f"still only {fig.span(tuned['cutoff26'], 1, 100)}% at cutoff 26",
        f"RoPE's cutoff-26 lead is +{min(lead) * 100:.0f} to +{max(lead) * 100:.0f} points in every seed",
        # the paired paragraph
        f"RoPE − learned at cutoff 26 {fig.difference(c)}, p = {c.p_value:.1g} (every seed {fig.signed(min(lead), 2)} "
        f"to {fig.signed(max(lead), 2)})",
        f"on the length split {fig.difference(rope_learned['length'])}, p = {rope_learned['length'].p_value:.2g}",
        f"on the simple split {fig.difference(rope_learned['simple'])}, p = {rope_learned['simple'].p_value:.2f}",
        f"{fig.signed(cut['sinusoidal'].diff)} (p = {cut['sinusoidal'].p_value:.1g}) and {fig.signed(cut['t5'].diff)} "
        f"(p = {cut['t5'].p_value:.1g})",
        # the T5 learning-rate follow-up
        f"| default lr (above, seeds 0, 1, 2) | {points(cell(base, 'simple', 't5'))}% | "
        f"{points(cell(base, 'length', 't5'))}% | {points(cell(base, 'cutoff26', 't5'))}% | "
        f"{fig.mean(cell(base, 'simple', 't5', 'val/token_acc'))} |",
        f"| bias tables at 20× (seeds 0, 1, 2) | {points(tuned['simple'])}% | {points(tuned['length'])}% | "
        f"{points(tuned['cutoff26'])}% | {fig.mean(cell(t5_lr, 'simple', 't5', 'val/token_acc'))} |",
        f"T5 gains {min(per_seed_gain) * 100:.0f}–{max(per_seed_gain) * 100:.0f} points on the simple split in every "
        f"seed ({', '.join(f'{g * 100:.1f}' for g in per_seed_gain[:-1])} and {per_seed_gain[-1] * 100:.1f}; "
        f"20× − default {fig.difference(gain['simple'])}, "
        f"p = {gain['simple'].p_value:.1g}",
        f"cutoff 26: {fig.median([v * 100 for v in tuned['cutoff26'].values()], 1)}% median",
        f"20× − default {fig.difference(gain['cutoff26'])}, p = {gain['cutoff26'].p_value:.1g}; "
        f"length split {fig.signed(gain['length'].diff)}, p = {gain['length'].p_value:.2f}",
    ]


def vit_positional() -> list[str]:
    five, twenty = results("vit_positional", "vit_positional"), results("vit_positional", "vit_positional_equivalence")
    recipe = results("vit_positional", "vit_positional_recipe")
    acc = {s: fig.seeds(five, f"pos_encoding={s}", "val/acc") for s in ("none", "learned", "sinusoidal")}
    loss = {s: fig.seeds(five, f"pos_encoding={s}", "val/loss") for s in ("none", "learned", "sinusoidal")}
    none, sincos = fig.paired(acc["none"], acc["learned"]), fig.paired(acc["sinusoidal"], acc["learned"])
    gap, sincos_by_seed = fig.by_seed(acc["none"], acc["learned"]), fig.by_seed(acc["sinusoidal"], acc["learned"])
    eq_acc = {s: fig.seeds(twenty, f"pos_encoding={s}", "val/acc") for s in ("learned", "sinusoidal")}
    eq_loss = {s: fig.seeds(twenty, f"pos_encoding={s}", "val/loss") for s in ("learned", "sinusoidal")}
    equivalence = fig.paired(eq_acc["sinusoidal"], eq_acc["learned"], margin=0.02)  # the spec's margin
    eq_loss_diff = fig.paired(eq_loss["sinusoidal"], eq_loss["learned"])
    with_recipe = {c: fig.seeds(recipe, c, "val/acc") for c in ("none", "learned-1d", "learned-2d", "sincos-2d")}
    no_pe_recipe = fig.paired(with_recipe["none"], with_recipe["learned-1d"])

    def row(label: str, scheme: str, paper: str) -> str:
        return f"| {label} | {fig.mean_std(acc[scheme])} | {fig.mean_std(loss[scheme])} | {paper} |"

    def recipe_row(cell: str) -> str:
        label = {"none": "none", "learned-1d": "learned 1-D", "learned-2d": "learned 2-D", "sincos-2d": "2-D sin-cos"}
        sizes = " | ".join(fig.mean_std(fig.seeds(recipe, cell, f"val/acc@{n}")) for n in (8, 12, 16))
        return f"| {label[cell]} | {sizes} |"

    def points(c) -> str:
        return f"{fig.signed(c.diff * 100, 1)} points"

    return [
        # verdict and what would change it
        f"none − learned {points(none)}, paired 95% CI {fig.interval(none, 1, 100)}, p = {none.p_value:.1g}",
        f"2-D sin-cos − learned 1-D is {fig.signed(equivalence.diff * 100, 2)} points, 95% CI "
        f"{fig.interval(equivalence, 2, 100)}",
        f"shows them equivalent (p = {equivalence.equivalence_p:.2g}",
        f"({fig.signed(eq_loss_diff.diff)} nats {fig.interval(eq_loss_diff)}, p = {eq_loss_diff.p_value:.1g})",
        f"the no-PE gap (every seed {fig.span([-g for g in gap], 1, 100)} points behind learned 1-D)",
        f"smallest detectable difference is {equivalence.mde * 100:.1f} points",
        # the 5-seed table and its pairs
        row("none", "none", "0.614"),
        row("learned 1-D", "learned", "0.642"),
        f"| 2-D sin-cos | {fig.mean_std(acc['sinusoidal'])} (Δ vs learned {fig.signed(sincos.diff)}, "
        f"p = {sincos.p_value:.2f}) | {fig.mean_std(loss['sinusoidal'])} | 0.640 |",
        f"2-D − learned {points(sincos)}, per seed {fig.listed([d * 100 for d in sincos_by_seed], 1, sign=True)}, "
        f"95% CI {fig.interval(sincos, 1, 100)}, p = {sincos.p_value:.2f}",
        # 20 seeds
        f"| val accuracy | {fig.mean_std(eq_acc['learned'], 4)} | {fig.mean_std(eq_acc['sinusoidal'], 4)} | "
        f"{fig.difference(equivalence, 4)} | {equivalence.p_value:.2f} | {equivalence.mde:.4f} | "
        f"{equivalence.equivalence_p:.2g} (equivalent) |",
        f"| val loss | {fig.mean_std(eq_loss['learned'], 4)} | {fig.mean_std(eq_loss['sinusoidal'], 4)} | "
        f"{fig.difference(eq_loss_diff, 4)} | {eq_loss_diff.p_value:.1g} | {eq_loss_diff.mde:.4f} | — |",
        # under the recipe
        f"({fig.mean([v * 100 for v in with_recipe['none'].values()], 1)}% against "
        f"{fig.mean([v * 100 for v in with_recipe['learned-1d'].values()], 1)}% for learned 1-D; "
        f"{points(no_pe_recipe)}, "
        f"paired 95% CI {fig.interval(no_pe_recipe, 1, 100)}, p = {no_pe_recipe.p_value:.2g}, 3 seeds)",
        *(recipe_row(cell) for cell in with_recipe),
    ]


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


def extrapolation() -> list[str]:
    long, follow_up = (
        results("extrapolation", "extrapolation_long"),
        results("extrapolation", "extrapolation_t5_distance"),
    )
    lengths = (64, 128, 256, 512)

    def at(name: str, n: int) -> dict[int, float]:
        sweep, cell = (follow_up, "t5_max_distance=32") if name == "t5-32" else (long, f"pos_encoding={name}")
        return fig.seeds(sweep, cell, f"val/loss@{n}")

    def ratio(name: str) -> str:
        return fig.mean([a / b for a, b in zip(at(name, 512).values(), at(name, 64).values())], 2)

    def row(label: str, name: str) -> str:
        return f"| {label} | " + " | ".join(fig.mean_std(at(name, n)) for n in lengths) + f" | {ratio(name)} |"

    def diff(a: str, b: str, n: int, n_b: int | None = None):
        return fig.paired(at(a, n), at(b, n if n_b is None else n_b))

    t5_rope_8, t5_rope_4, rope_t5_4 = diff("t5-32", "rope", 512), diff("t5-32", "rope", 256), diff("rope", "t5", 256)
    alibi_flat, rope_2x, alibi_rope_2x = (
        diff("alibi", "alibi", 512, 64),
        diff("rope", "rope", 128, 64),
        diff("alibi", "rope", 128),
    )
    t5_none_1, t5_none_8, none_learned = diff("t5", "none", 64), diff("t5", "none", 512), diff("none", "learned", 64)
    distance_8, distance_1 = diff("t5-32", "t5", 512), diff("t5-32", "t5", 64)
    return [
        f"(loss at 8× ÷ loss at 1×: {ratio('sinusoidal')}, the paper's 1.78)",
        f"even improves to 8× ({ratio('alibi')}; 8× − 1× = {fig.signed(alibi_flat.diff)} nats, "
        f"{below(alibi_flat.p_value)})",
        f"(8×: {fig.mean(at('t5', 512))} vs {fig.mean(at('rope', 512))}, p = {diff('t5', 'rope', 512).p_value:.1g})",
        f"(8×: {fig.mean(at('t5-32', 512))} vs {fig.mean(at('rope', 512))}, {fig.difference(t5_rope_8)}, "
        f"p = {t5_rope_8.p_value:.2g})",
        f"(ratios {ratio('rope')} and {ratio('t5')}, against 1.22 and 1.09)",
        row("sinusoidal", "sinusoidal"),
        f"| learned | {fig.mean_std(at('learned', 64))} | n/a | n/a | n/a | n/a |",
        row("rope", "rope"),
        row("alibi", "alibi"),
        row("t5 (max_distance 128)", "t5"),
        row("t5 (max_distance 32, follow-up)", "t5-32"),
        row("none", "none"),
        f"({fig.mean(at('sinusoidal', 256), 2)} vs {fig.mean(at('sinusoidal', 64), 2)})",
        f"{fig.signed(alibi_flat.diff)} at 8× (95% CI {fig.interval(alibi_flat)})",
        f"ALiBi ({fig.mean(at('alibi', 256))}) < RoPE ({fig.mean(at('rope', 256))}) < T5 ({fig.mean(at('t5', 256))}) < "
        f"sinusoidal ({fig.mean(at('sinusoidal', 256))}): RoPE − T5 is {fig.difference(rope_t5_4)}, "
        f"p = {rope_t5_4.p_value:.1g}",
        f"T5 − RoPE is {fig.difference(t5_rope_4)}, p = {t5_rope_4.p_value:.2g} at 4×, and "
        f"{fig.signed(t5_rope_8.diff)} at 8×",
        f"RoPE wins ({fig.mean(at('rope', 64))}; ALiBi is {fig.difference(diff('alibi', 'rope', 64))} behind)",
        f"({fig.difference(rope_2x)} over its 1×, p = {rope_2x.p_value:.1g})",
        f"({fig.difference(alibi_rope_2x)}, p = {alibi_rope_2x.p_value:.2f})",
        f"{fig.signed(t5_none_1.diff, 2)} at 1× and {fig.signed(t5_none_8.diff, 2)} at 8× "
        f"({fig.interval(t5_none_8, 2)}, p = {t5_none_8.p_value:.1g})",
        f"`none` trains ({fig.mean(at('none', 64), 2)} at 1×",
        f"{fig.number(none_learned.diff, 2)} behind learned positions ({fig.interval(none_learned, 2)})",
        f"drops from {ratio('t5')} to {ratio('t5-32')} (8×: {fig.difference(distance_8)}, "
        f"p = {scientific(distance_8.p_value)}",
        f"with no change at 1×, {fig.difference(distance_1)})",
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


def table_rows(text: str) -> list[str]:
    """A markdown table's data rows (not its header or rule)."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    header = {i + 1 for i, line in enumerate(lines) if i + 1 < len(lines) and lines[i + 1].startswith("| ---")}
    return [line for i, line in enumerate(lines) if not line.startswith("| ---") and i + 1 not in header]


def without_seeds_column(row: str) -> str:
    """The EOS rows as the scan_length README shows them: without split_table's `seeds` column."""
    cells = row.split(" | ")
    return " | ".join(cells[:2] + cells[3:]) if len(cells) == 7 else row  # split | scheme | seeds | 4 shares


# (study, sweep folder, table script, its committed output, how the README shows a row)
TABLES = [
    ("scan_length", "scan_length", split_table, "split_table.md", without_seeds_column),
    ("ffn_norm", "ffn_norm_2k", pair_table, "pair_table.md", str),
    ("norm_placement", "norm_placement", loss_table, "loss_table.md", str),
    ("peft", "peft_gpt_tuned", peft_verdict, "tuned_verdict.md", str),
    ("peft", "peft_bert_tuned", peft_verdict, "tuned_verdict.md", str),
]


@pytest.mark.parametrize(("study", "spec", "script", "output", "shown"), TABLES, ids=[f"{t[0]}-{t[1]}" for t in TABLES])
def test_readme_tables_are_their_scripts_output(study, spec, script, output, shown, monkeypatch):
    """A table a README quotes is its script's output on the committed results, row for row, and the
    committed output file is what the script gives now."""
    monkeypatch.chdir(ROOT)  # the scripts name the folder as given: the README's command gives it from the root
    sweep = results(study, spec).relative_to(ROOT)
    text = script.table(sweep)
    assert text == (sweep / output).read_text(), (
        f"{sweep / output} is stale: re-run python -m {script.__name__} {sweep}"
    )
    readme = (STUDIES / study / "README.md").read_text().splitlines()
    missing = [shown(row) for row in table_rows(text) if shown(row) not in readme]
    assert not missing, f"{study}/README.md lacks these rows of {output}:\n" + "\n".join(missing)


# (study, verdict script, its sweep folders in the order it takes them): a tuned study's verdict lines
VERDICTS = [
    ("norm_placement", norm_verdict, ("norm_placement_tuned",), "tuned_verdict.md"),
    ("mlm_positional", mlm_verdict, ("mlm_positional_tuned", "mlm_positional_tuned_scale"), "tuned_verdict.md"),
    ("scan_length", scan_verdict, ("scan_length_tuned",), "tuned_verdict.md"),
    ("ffn_norm", ffn_ladder_verdict, ("ffn_norm_ladder",), "ladder_verdict.md"),
    ("extrapolation", extrapolation_ladder_verdict, ("extrapolation_ladder",), "ladder_verdict.md"),
    ("stability", stability_verdict, ("qk_norm_zloss",), "verdict.md"),
    ("dyt", dyt_verdict, ("dyt_gpt", "dyt_vit", "dyt_vit_wide", "dyt_gpt_wide"), "verdict.md"),
    ("peri_ln", peri_ln_verdict, ("peri_ln", "peri_ln_embedding_norm", "peri_ln_reordered_qk_norm"), "verdict.md"),
]


@pytest.mark.parametrize(("study", "script", "folders", "output"), VERDICTS, ids=[v[2][0] for v in VERDICTS])
def test_readme_verdicts_are_their_scripts_output(study, script, folders, output, monkeypatch):
    """A tuned study's (or ladder's) verdict lines are its script's output on the committed ledgers (the folders
    committed so far), the committed verdict file is that output, and the README quotes every line."""
    monkeypatch.chdir(ROOT)
    sweeps = [results(study, f).relative_to(ROOT) for f in folders if (results(study, f) / "results.csv").exists()]
    lines = script.verdicts(*sweeps)
    assert "\n".join(lines) + "\n" == (sweeps[0] / output).read_text(), (
        f"{sweeps[0]}/{output} is stale: re-run python -m {script.__name__} {' '.join(map(str, sweeps))}"
    )
    readme = normalized((STUDIES / study / "README.md").read_text())
    missing = [line for line in lines if normalized(line.removeprefix("- ")) not in readme]
    assert not missing, f"{study}/README.md lacks these verdict lines:\n" + "\n".join(missing)
