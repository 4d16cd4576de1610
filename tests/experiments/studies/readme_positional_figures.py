"""The figures the positional-encoding studies' READMEs quote (length_generalization, scan_length,
vit_positional, extrapolation), each spelled from the committed ledger it came from
(`results/<spec>/results.csv`) by the study's function, named as its folder; test_readme_quotes.py
checks that each README quotes them."""

from __future__ import annotations

from pathlib import Path

from experiments.studies import ledger_figures as fig
from tests.experiments.studies.readme_figures import below, results, scientific


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
