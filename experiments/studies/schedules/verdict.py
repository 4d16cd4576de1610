"""Study 21's verdicts, derived from its two ledgers by the rules `wsd_horizons.yaml` states before any run: at each
horizon, WSD with a 1-sqrt cooldown against cosine (a match within ±0.02 nats), 1-sqrt against a linear cooldown,
and a constant-rate run's uniform weight average (`test_avg/loss`) against its trained weights and against the
1-sqrt cooldown, on test/loss paired by seed (the final seeds of both sweeps are the same seeds: the same data
order and initialisation). A comparison touching a cell whose search ended unbracketed, or one that never left the
unigram loss, is inconclusive by rule (`analysis.decisions`). `verdict.md` also tables each (cell, horizon)'s chosen
rate and test loss; beside it, `budget.png` (test loss against training steps, a line per schedule).

    python -m experiments.studies.schedules.verdict experiments/studies/schedules/results/wsd_horizons \\
        experiments/studies/schedules/results/cosine_horizons
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from experiments.analysis import decisions as rules
from experiments.analysis import plots
from experiments.analysis.stats import Comparison, paired_difference
from experiments.analysis.sweep_results import SweepResults, load
from experiments.studies import table_script
from experiments.studies.horizon_cells import HorizonCells, branched, separate

METRIC, AVERAGED = "test/loss", "test_avg/loss"
MARGIN = 0.02  # nats, the spec's equivalence margin
UNIGRAM = 3.35  # character-level Tiny Shakespeare's unigram loss: a cell not below it never left its floor
ONE_SQRT, LINEAR, CONSTANT, COSINE = "wsd-1sqrt", "wsd-linear", "constant-avg", "cosine"


class Study(HorizonCells):
    """The four schedules at each horizon: WSD's branches and cosine's separate runs."""

    def __init__(self, wsd: SweepResults, cosine: SweepResults):
        super().__init__(branched(wsd) | separate(cosine, COSINE), METRIC, UNIGRAM, MARGIN)

    def run_time(self, schedule: str) -> dict[int, float]:
        """seed -> the wall time (s) its final runs of `schedule` took for every horizon: a branched schedule's
        decay branches and the stable run they resumed from (counted once); cosine's separate runs."""
        out: dict[int, float] = {}
        counted: set[tuple[str, int]] = set()
        for h in self.horizons:
            sweep, name = self.where[(schedule, h)]
            found = sweep.cells.get(name)
            for row in found.rows if found else []:
                if row["status"] != "done":
                    continue
                seed = int(row["seed"])
                runs = {(name, seed)}
                if row.get("parent"):  # "<stable cell>/seed<n>"
                    parent, parent_seed = row["parent"].rsplit("/seed", 1)
                    runs.add((parent, int(parent_seed)))
                for run in runs - counted:
                    counted.add(run)
                    out[seed] = out.get(seed, 0.0) + float(sweep.ledger.rows[run]["wall_time_s"])
        return out


def averaging_closes_part(gain: Comparison, gap: Comparison) -> rules.Verdict:
    """Claim (c) at one horizon: the average beats the trained weights (gain's CI below 0) and stays behind the
    cooldown (gap's CI above 0)."""
    if rules.side(gain) == "below" and rules.side(gap) == "above":
        return rules.Verdict(rules.REPRODUCED, "better than its trained weights, behind the cooldown")
    if rules.side(gain) == "above" or rules.side(gap) == "below":
        return rules.Verdict(rules.NOT_REPRODUCED, "no gain from averaging, or averaging beats the cooldown")
    return rules.Verdict(rules.INCONCLUSIVE, "a 95% CI holds 0")


def claims(study: Study) -> list[tuple[str, list[rules.Verdict], list[str]]]:
    """Each claim with its per-horizon verdicts and the differences behind them."""
    out = []
    matches = [(study.between(ONE_SQRT, COSINE, h), h) for h in study.horizons]
    out.append(("WSD with a 20% 1-sqrt cooldown matches cosine",
                [rules.decide(rules.within_margin(c), *study.guards(h, ONE_SQRT, COSINE)) for c, h in matches],
                [f"{h}: 1-sqrt − cosine {rules.interval(c, tost=True)}" for c, h in matches]))  # fmt: skip
    shapes = [(study.between(ONE_SQRT, LINEAR, h), h) for h in study.horizons]
    out.append(("1-sqrt beats a linear cooldown",
                [rules.decide(rules.direction_not_level(c, "below"), *study.guards(h, ONE_SQRT, LINEAR))
                 for c, h in shapes],
                [f"{h}: 1-sqrt − linear {rules.interval(c, tost=True)}" for c, h in shapes]))  # fmt: skip
    averaged, texts = [], []
    for h in study.horizons:
        gain = paired_difference(study.values(CONSTANT, h, AVERAGED), study.values(CONSTANT, h))
        gap = study.between(CONSTANT, ONE_SQRT, h, AVERAGED)
        averaged.append(rules.decide(averaging_closes_part(gain, gap), *study.guards(h, CONSTANT, ONE_SQRT)))
        texts.append(f"{h}: average − trained {rules.interval(gain)}; average − 1-sqrt {rules.interval(gap)}")
    out.append(("Averaging without a cooldown closes part of the gap to one", averaged, texts))
    return out


def verdicts(wsd_dir: Path, cosine_dir: Path) -> list[str]:
    study = Study(load(wsd_dir), load(cosine_dir))
    if study.missing():
        return [f"- no final runs yet for {', '.join(study.missing())}: no verdict"]
    lines = []
    for wording, per_horizon, texts in claims(study):
        verdict = rules.combine(per_horizon)
        lines.append(f"- **{wording}: {verdict}.**{rules.why(verdict)} " + "; ".join(
            f"{text} ({v})" for text, v in zip(texts, per_horizon, strict=True)) + ".")  # fmt: skip
    return [*lines, measured_cost(study), "", *table(study)]


def measured_cost(study: Study) -> str:
    """Reported beside the verdicts: the run time of every horizon from one branched run against separate runs,
    from the ledgers' wall times (both sweeps ran with the same --jobs, so under the same load)."""
    branched, separate = study.run_time(ONE_SQRT), study.run_time(COSINE)
    seeds = sorted(set(branched) & set(separate))
    if not seeds:
        return f"- Cost, measured: no seed has both {ONE_SQRT}'s branched runs and {COSINE}'s separate runs yet."
    b, s = (sum(t[seed] for seed in seeds) / len(seeds) for t in (branched, separate))
    return (
        f"- Cost, measured (run time in the ledgers, mean over seeds {seeds}): {ONE_SQRT}'s stable run and its "
        f"{len(study.horizons)} decay branches took {b:.0f} s for all {len(study.horizons)} horizons; "
        f"{COSINE}'s separate runs {s:.0f} s ({1 - b / s:.0%} less time branched)."
    )


def table(study: Study) -> list[str]:
    rows = ["| schedule | " + " | ".join(f"{h} steps: lr, test/loss" for h in study.horizons) + " |",
            "|---|" + "---|" * len(study.horizons)]  # fmt: skip
    cell: Callable[[str, int, str], str] = lambda s, h, m: (  # noqa: E731
        f"{study.chosen(s, h):g}, {table_script.mean_std(list(study.values(s, h, m).values()))}"
    )
    for schedule in (COSINE, ONE_SQRT, LINEAR, CONSTANT):
        rows.append(f"| {schedule} | " + " | ".join(cell(schedule, h, METRIC) for h in study.horizons) + " |")
    rows.append(f"| {CONSTANT}, averaged | " + " | ".join(cell(CONSTANT, h, AVERAGED) for h in study.horizons) + " |")
    return rows


def plot(study: Study, out: Path) -> bool:
    """Each schedule's test loss against its training length, the suite's budget plot (`plots.budget_curves`)."""
    lines = [(s, s, METRIC) for s in (COSINE, ONE_SQRT, LINEAR, CONSTANT)] + [
        (f"{CONSTANT}, averaged", CONSTANT, AVERAGED)]  # fmt: skip
    points = {label: {float(h): list(study.values(schedule, h, metric).values()) for h in study.horizons}
              for label, schedule, metric in lines}  # fmt: skip
    return plots.budget_curves(points, "training steps", METRIC, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wsd_dir", type=Path, help="wsd_horizons' folder (verdict.md and budget.png go here)")
    parser.add_argument("cosine_dir", type=Path, help="cosine_horizons' folder")
    args = parser.parse_args(argv)
    found = verdicts(args.wsd_dir, args.cosine_dir)
    if found[0].startswith("- **"):
        plot(Study(load(args.wsd_dir), load(args.cosine_dir)), args.wsd_dir / "budget.png")
    text = "\n".join(found) + "\n"
    (args.wsd_dir / "verdict.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
