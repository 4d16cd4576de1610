"""The tuning rule (`experiments.sweep.tuning`) on synthetic objectives: no training needed."""

from __future__ import annotations

import math

import pytest

from experiments.sweep.tuning import FAILED_SCORE, Tune, TunedKey, TuneError, initial_points, parse_tune, search

LR = TunedKey("optim.lr", (1e-3, 3e-3, 1e-2))


def run_search(tune: Tune, objective, max_rounds: int = 20):
    """Plays the sweep: each round runs the pending points (the objective), until the search chooses."""
    results: dict = {}
    rounds = 0
    while True:
        state = search(tune, lambda p: results.get(p))
        if not state.pending:
            return state, rounds, results
        rounds += 1
        assert rounds <= max_rounds
        for point in state.pending:
            results[point] = objective(*point)


def valley(at: float):
    """A loss with its minimum at learning rate `at`, quadratic in log10(lr)."""
    return lambda lr: (math.log10(lr) - math.log10(at)) ** 2


def test_an_interior_optimum_needs_no_extension():
    state, rounds, results = run_search(Tune((LR,), 2, "val/loss", (0,)), valley(3e-3))
    assert state.chosen == (3e-3,) and rounds == 1 and len(results) == 3 and not state.unbracketed


def test_an_optimum_beyond_the_grid_extends_until_bracketed():
    state, rounds, results = run_search(Tune((LR,), 4, "val/loss", (0,)), valley(0.1))
    values = sorted(p[0] for p in results)
    assert state.chosen == (0.1,) and values[-1] == pytest.approx(0.316227766017) and rounds == 4
    assert not state.unbracketed and values[0] == 1e-3  # only the side the optimum lies on grows
    # the extension steps by the grid's mean ratio, written exactly (12 significant digits)
    assert values[3:] == [0.0316227766017, 0.1, 0.316227766017]


def test_the_cap_stops_the_search_and_flags_the_key():
    state, _, results = run_search(Tune((LR,), 1, "val/loss", (0,)), valley(10.0))
    assert state.chosen == (0.0316227766017,) and state.unbracketed == ("optim.lr",) and len(results) == 4


def test_an_edge_still_improving_is_open_though_the_best_is_inside():
    """A second dip past the grid: the top edge is better than its neighbour, so the range grows until the curve
    turns up there; a better point found so is chosen."""
    grid = TunedKey("optim.lr", (1e-3, 3e-3, 1e-2, 3e-2))
    losses = {1e-3: 2.0, 3e-3: 1.0, 1e-2: 1.6, 3e-2: 1.5, 0.0932: 1.7}  # 0.0932: the grid ratio past 3e-2
    state, rounds, results = run_search(Tune((grid,), 4, "val/loss", (0,)), lambda lr: losses[round(lr, 4)])
    assert state.chosen == (3e-3,) and not state.unbracketed and rounds == 2 and (0.0932169751786,) in results
    losses |= {0.0932: 0.5, 0.2896: 0.9}  # past the dip, a new best: it must be bracketed in turn
    state, _, results = run_search(Tune((grid,), 4, "val/loss", (0,)), lambda lr: losses[round(lr, 4)])
    assert state.chosen == (0.0932169751786,) and not state.unbracketed and len(results) == 6


def test_an_open_edge_at_the_cap_is_unbracketed():
    grid = TunedKey("optim.lr", (1e-3, 3e-3, 1e-2, 3e-2))
    losses = {1e-3: 2.0, 3e-3: 1.0, 1e-2: 1.6, 3e-2: 1.5}
    state, _, _ = run_search(Tune((grid,), 0, "val/loss", (0,)), lambda lr: losses[round(lr, 4)])
    assert state.chosen == (3e-3,) and state.unbracketed == ("optim.lr",)


def test_below_the_grid_and_higher_is_better():
    def accuracy(lr):
        return -valley(1e-4)(lr)

    state, _, _ = run_search(Tune((LR,), 3, "val/acc", (0,)), accuracy)
    assert state.chosen[0] == pytest.approx(1e-4, rel=0.02) and not state.unbracketed


def test_diverged_points_count_as_worst():
    """The best finite point at the high edge extends into a diverging region: it stays chosen, bracketed."""
    state, _, results = run_search(Tune((LR,), 2, "val/loss", (0,)), lambda lr: math.nan if lr > 0.011 else -lr)
    assert state.chosen == (1e-2,) and not state.unbracketed and math.isnan(results[(0.0316227766017,)])
    everything_diverges = run_search(Tune((LR,), 2, "val/loss", (0,)), lambda lr: math.nan)[0]
    assert everything_diverges.chosen is None and everything_diverges.unbracketed == ("optim.lr",)


def test_a_failed_point_is_the_worst_but_closes_no_side():
    """A crash at the top edge is no result: the best point below it stays the choice, but the search looks one
    step past the crash, and reports the key open when the cap stops it there."""
    crashed = lambda lr: FAILED_SCORE if lr > 0.011 else -lr  # noqa: E731
    state, _, results = run_search(Tune((LR,), 2, "val/loss", (0,)), crashed)
    assert state.chosen == (1e-2,) and state.unbracketed == ("optim.lr",) and len(results) == 5
    past = lambda lr: FAILED_SCORE if 0.011 < lr < 0.05 else math.nan if lr > 0.05 else -lr  # noqa: E731
    state, _, results = run_search(Tune((LR,), 2, "val/loss", (0,)), past)  # one step on, a divergence closes it
    assert state.chosen == (1e-2,) and not state.unbracketed and math.isnan(results[(0.1,)])


def test_two_keys_bracket_independently():
    warmup = TunedKey("optim.warmup_steps", (10.0, 100.0))
    state, _, results = run_search(
        Tune((LR, warmup), 3, "val/loss", (0,)), lambda lr, w: valley(0.1)(lr) + valley(100.0)(w)
    )
    assert state.chosen == (0.1, 100.0) and not state.unbracketed
    assert {p[1] for p in results} == {10.0, 100.0, 1000.0}  # 100 was an edge once: one step past it


def test_the_search_is_a_pure_function_of_the_results():
    """Resuming (or a second sweep on the folder) recomputes the same points from what has ended."""
    tune = Tune((LR,), 3, "val/loss", (0,))
    _, _, results = run_search(tune, valley(0.1))
    partial = dict(list(results.items())[:4])
    assert search(tune, partial.get).pending == ((0.1,),)  # the next extension, from the 4 that ended
    assert initial_points(tune) == ((1e-3,), (3e-3,), (1e-2,))


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"grid": {"optim.lr": [1e-3]}}, "at least two"),
        ({"grid": {"optim.lr": [1e-2, 1e-3]}}, "ascending"),
        ({"grid": {"optim.lr": [1e-3, 2e-3, 1e-2]}}, "log-spaced"),
        ({"grid": {"optim.lr": [1e-3, 1e-2]}, "metric": "test/loss"}, "val/"),
        ({"grid": {"optim.lr": [1e-3, 1e-2]}, "metric": "val/nonsense"}, "no declared direction"),
        ({"grid": {"optim.lr": [1e-3, 1e-2]}, "extend": -1}, "extend"),
        ({"grid": {"model.arch.norm": [1e-3, 1e-2]}}, "fixes or varies"),
        ({"grid": {"optim.lr": [1e-3, 1e-2]}, "cap": 3}, "unknown key"),
    ],
)
def test_bad_blocks_name_the_problem(raw, message):
    with pytest.raises(TuneError, match=message):
        parse_tune(raw, (0, 1), ("model.arch.norm",))


def test_defaults():
    tune = parse_tune({"grid": {"optim.lr": [1e-3, 3e-3, 1e-2]}}, (5, 6), ())
    assert tune.extend == 4 and tune.metric == "val/loss" and tune.seeds == (5,) and tune.keys[0].grid == LR.grid
