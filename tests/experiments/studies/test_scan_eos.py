"""The SCAN end-of-sequence diagnosis classifies each decode by how it differs from its reference."""

import pytest

from experiments.studies.scan_length.scan_eos import eos_outcome


@pytest.mark.parametrize(
    "hypothesis, expected",
    [
        ([5, 6, 7], "exact"),
        ([5, 6], "stopped early"),
        ([], "stopped early"),
        ([5, 6, 7, 7], "overran"),
        ([5, 7, 7], "wrong"),
        ([6, 6, 7, 7], "wrong"),  # longer, but not the reference continued
        ([5, 7], "wrong"),  # shorter, but not a prefix
    ],
)
def test_eos_outcome(hypothesis, expected):
    assert eos_outcome(hypothesis, [5, 6, 7]) == expected
