"""`tune:` with `horizons:`: every (cell, horizon) at its own tuned point, each searched point one branched run.

The optimal peak rate moves with training length, so a cell is tuned at every horizon: each horizon cell
`<cell>,horizon=<steps>` has its own search (`tuning.search`, the bracketing rule included). A searched point
costs one stable run per tune seed, `<cell>,horizon=<longest>~<point>~stable`, and a decay branch at each horizon
whose search asked for it, `<cell>,horizon=<steps>~<point>` (phase `search`). Once a horizon's search has chosen,
its final runs are branches `<cell>,horizon=<steps>` (phase `final`, evaluated on the test split) of the stable
run at the chosen point and a final seed, which the horizons that chose the same point share, and which is the
search's own stable run where a final seed is also a tune seed (the same config and seed: the same run).

As in an untuned horizons sweep (`experiments.sweep.branches`), which runs are needed is a function of the
ledger, and a branch whose stable run failed or diverged before its start is recorded as such (for a search
point: the worst score, as a diverged run is).
"""

from __future__ import annotations

from pathlib import Path

from experiments.records.ledger import FINAL_PHASE, SEARCH_PHASE, UNBRACKETED_COLUMN, Ledger
from experiments.sweep.branches import Branching, HorizonPlan, add_branching
from experiments.sweep.expand import point_score, search_cell_name
from experiments.sweep.horizons import horizon_name
from experiments.sweep.spec import Spec
from experiments.sweep.tuning import Point, SearchState, Tune, search
from experiments.sweep.validate import CheckedCell


def _tag(tune: Tune, point: Point) -> str:
    """`~lr=0.004`: a point's mark on its run names."""
    return search_cell_name("", tune, point)


def horizon_searches(spec: Spec, ledger: Ledger) -> dict[tuple[str, int], SearchState]:
    """Each (cell, horizon)'s search, given the ledger's search branches."""
    tune, horizons = spec.tune, spec.horizons
    assert tune is not None and horizons is not None, "horizon_searches needs tune: and horizons:"
    return {
        (cell, h): search(
            tune, lambda p, c=horizon_name(cell, h): point_score(ledger, search_cell_name(c, tune, p), tune)
        )  # fmt: skip
        for cell in horizons.cells
        for h in horizons.steps
    }


def tuned_horizon_runs(
    spec: Spec, checked: dict[str, CheckedCell], out_dir: Path, threads: dict[str, int], ledger: Ledger
) -> HorizonPlan:
    """Cell by cell: the stable runs and search branches the horizons' searches ask for, then at each point the
    horizons chose, the final seeds' stable runs and final branches (arguments as `branches.horizon_runs`)."""
    tune, horizons = spec.tune, spec.horizons
    assert tune is not None and horizons is not None, "tuned_horizon_runs needs tune: and horizons:"
    states, plan = horizon_searches(spec, ledger), HorizonPlan()

    def add(what: Branching) -> None:
        add_branching(plan, what, spec, checked, out_dir, threads, ledger)

    for cell in horizons.cells:
        asked: dict[Point, list[int]] = {}  # each searched point -> the horizons whose search asks for it
        chosen: dict[Point, list[int]] = {}  # each chosen point -> the horizons that chose it
        for h in horizons.steps:
            for point in states[cell, h].points:
                asked.setdefault(point, []).append(h)
            if (point := states[cell, h].chosen) is not None:
                chosen.setdefault(point, []).append(h)
        for point, wanted in asked.items():
            tag = _tag(tune, point)
            for seed in tune.seeds:
                add(Branching(cell, seed, tuple(wanted), tune.overrides(point), tag, tag, SEARCH_PHASE))
        for point, wanted in chosen.items():
            for h in wanted:  # one Branching per horizon: each final row records what its own search left open
                open_keys = ",".join(states[cell, h].unbracketed)
                for seed in spec.seeds:
                    add(Branching(cell, seed, (h,), tune.overrides(point), _tag(tune, point), "", FINAL_PHASE,
                                  ((UNBRACKETED_COLUMN, open_keys),), evaluate=True))  # fmt: skip
    return plan
