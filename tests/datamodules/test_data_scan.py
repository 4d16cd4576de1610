from collections import Counter

from datamodules.scan import all_pairs, cutoff_split, length_split, num_actions, simple_split


def test_full_set_has_20910_unique_pairs() -> None:
    pairs = all_pairs()
    assert len(pairs) == 20910
    assert len({c for c, _ in pairs}) == 20910
    assert pairs == sorted(pairs)
    assert max(num_actions(p) for p in pairs) == 48


def test_known_pairs() -> None:
    d = dict(all_pairs())
    assert d["jump twice"] == "I_JUMP I_JUMP"
    assert d["turn left"] == "I_TURN_LEFT"
    assert d["walk around right"] == " ".join(["I_TURN_RIGHT I_WALK"] * 4)
    assert d["turn opposite right"] == "I_TURN_RIGHT I_TURN_RIGHT"
    assert d["look opposite left thrice"] == " ".join(["I_TURN_LEFT I_TURN_LEFT I_LOOK"] * 3)
    assert d["run left and jump"] == "I_TURN_LEFT I_RUN I_JUMP"
    assert d["run left after jump"] == "I_JUMP I_TURN_LEFT I_RUN"  # "x after y" does y first


def test_length_split_counts() -> None:
    train, test = length_split()
    assert (len(train), len(test)) == (16990, 3920)
    assert max(map(num_actions, train)) == 22 and min(map(num_actions, test)) == 24  # no command has 23


def test_cutoff_split() -> None:
    train, test = cutoff_split(26)
    assert len(train) + len(test) == 20910
    assert max(map(num_actions, train)) <= 26 < min(map(num_actions, test))
    assert cutoff_split(22) == length_split()


def test_simple_split_is_seeded_80_20_partition() -> None:
    train, test = simple_split(0)
    assert (len(train), len(test)) == (16728, 4182)
    assert Counter(train + test) == Counter(all_pairs())
    assert simple_split(0) == (train, test) and simple_split(1)[1] != test
    assert train == sorted(train) and test == sorted(test)
