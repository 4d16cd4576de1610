"""SCAN (Lake & Baroni, 2018), generated from its published grammar and interpretation rules.

Grammar::

    C -> S and S | S after S | S
    S -> V twice | V thrice | V
    V -> D[1] opposite D[2] | D[1] around D[2] | D | U
    D -> U left | U right | turn left | turn right
    U -> walk | look | run | jump

It yields exactly 20,910 distinct commands. Splits are returned sorted by command, so they do not
depend on generation order.
"""

from collections.abc import Callable
from functools import cache
from typing import Literal, get_args

import torch

from datamodules.sampling import TEST_SPLIT_SEED

Pair = tuple[str, str]  # (command, space-separated actions)

PRIMITIVES = {"walk": "I_WALK", "look": "I_LOOK", "run": "I_RUN", "jump": "I_JUMP"}
TURNS = {"left": "I_TURN_LEFT", "right": "I_TURN_RIGHT"}


def _verb_phrases() -> list[tuple[str, list[str]]]:
    """Every V with its actions: [[u]], [[x dir]] = TURN [[x]], opposite = TURN TURN [[x]],
    around = (TURN [[x]]) x 4, where x is a primitive or 'turn' (which acts as nothing)."""
    phrases = [(u, [a]) for u, a in PRIMITIVES.items()]
    for x, act in [*((u, [a]) for u, a in PRIMITIVES.items()), ("turn", [])]:
        for direction, turn in TURNS.items():
            phrases.append((f"{x} {direction}", [turn, *act]))
            phrases.append((f"{x} opposite {direction}", [turn, turn, *act]))
            phrases.append((f"{x} around {direction}", [turn, *act] * 4))
    return phrases


def _sentences() -> list[tuple[str, list[str]]]:
    out = []
    for v, acts in _verb_phrases():
        out += [(v, acts), (f"{v} twice", acts * 2), (f"{v} thrice", acts * 3)]
    return out


@cache
def all_pairs() -> list[Pair]:
    """All 20,910 (command, actions) pairs, sorted by command."""
    s = _sentences()
    pairs = {c: a for c, a in s}
    for c1, a1 in s:
        for c2, a2 in s:
            pairs[f"{c1} and {c2}"] = a1 + a2
            pairs[f"{c1} after {c2}"] = a2 + a1  # "x after y" does y first
    return sorted((c, " ".join(a)) for c, a in pairs.items())


def num_actions(pair: Pair) -> int:
    return len(pair[1].split())


def cutoff_split(cutoff: int = 26) -> tuple[list[Pair], list[Pair]]:
    """Train on pairs with at most ``cutoff`` actions, test on the longer ones (Csordás et al. 2021)."""
    pairs = all_pairs()
    return [p for p in pairs if num_actions(p) <= cutoff], [p for p in pairs if num_actions(p) > cutoff]


def length_split() -> tuple[list[Pair], list[Pair]]:
    """Lake & Baroni's length split: 16,990 train pairs (at most 22 actions), 3,920 test."""
    return cutoff_split(22)


def simple_split(seed: int = TEST_SPLIT_SEED, test_fraction: float = 0.2) -> tuple[list[Pair], list[Pair]]:
    """A seeded random 80/20 split (the paper's "simple" split, one fixed split as the paper's: every run is
    tested on the same pairs)."""
    pairs = all_pairs()
    perm = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(seed))
    test_idx = set(perm[: round(len(pairs) * test_fraction)].tolist())
    return [p for i, p in enumerate(pairs) if i not in test_idx], [p for i, p in enumerate(pairs) if i in test_idx]


ScanSplitName = Literal["simple", "length", "cutoff26"]
SCAN_SPLITS: dict[ScanSplitName, Callable[[], tuple[list[Pair], list[Pair]]]] = {
    "simple": simple_split,
    "length": length_split,
    "cutoff26": lambda: cutoff_split(26),
}
assert set(SCAN_SPLITS) == set(get_args(ScanSplitName))
