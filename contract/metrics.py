"""Which way each logged metric improves, declared beside the modules that log it.

The analysis (`experiments/analysis`) ranks cells and signs differences with this table; a metric
missing here is an error there, not a guess from its name. A tag is `stage/name`, optionally with a
suffix the module adds: `@<length>` (per evaluation length) or `_<split>` (`exact_match_ood`).
"""

from __future__ import annotations

from typing import Literal

Direction = Literal["lower", "higher"]
# a stage's suffix for the metrics of the averaged weights (`--averaging.kind`): `val_avg/loss`, `test_avg/acc`
AVERAGED_SUFFIX = "_avg"
# the tags a run's validation logs (the trained weights' and the average's), and with the test split's, every
# evaluation tag a ledger, a spec's report options and the analysis read
VALIDATION_PREFIXES = ("val/", f"val{AVERAGED_SUFFIX}/")
EVALUATION_PREFIXES = (*VALIDATION_PREFIXES, "test/", f"test{AVERAGED_SUFFIX}/")

METRIC_DIRECTIONS: dict[str, Direction] = {
    "loss": "lower",
    "bpt": "lower",  # bits per token
    "ppl": "lower",
    "acc": "higher",
    "token_acc": "higher",
    "exact_match": "higher",
    "bleu": "higher",
    "chrf": "higher",
}


def metric_base_name(tag: str) -> str:
    """`val/exact_match_ood@12` -> `exact_match`: the declared name a logged tag was built from.

    Raises:
        KeyError: the tag's metric has no declared direction.
    """
    name = tag.rsplit("/", 1)[-1].split("@", 1)[0]
    matches = [key for key in METRIC_DIRECTIONS if name == key or name.startswith(key + "_")]
    if not matches:
        raise KeyError(f"metric {tag!r} has no declared direction; add its name to contract.metrics.METRIC_DIRECTIONS")
    return max(matches, key=len)


def on_test_split(tag: str) -> str:
    """The test split's tag of a validation tag: `val/loss` -> `test/loss`, `val_avg/loss` -> `test_avg/loss`."""
    return "test" + tag[len("val") :] if tag.startswith(VALIDATION_PREFIXES) else tag


def higher_is_better(tag: str) -> bool:
    return METRIC_DIRECTIONS[metric_base_name(tag)] == "higher"
