"""The benchmark's `sharding` section in smoke mode: the plans of the GPU configs and the peaks measured on one plain
and two sharded CPU processes (gloo), each within reach of the plan of the same GPT. Long (it starts processes:
tests/conftest.py's LONG_FILES)."""

from __future__ import annotations

from experiments.bench import sharding
from experiments.bench.common import SMOKE, Context


def test_smoke_section_measures_each_setup_against_the_plan():
    section = sharding.run(Context(SMOKE, peak_flops=1.0))
    titles = [t.title for t in section.tables]
    assert "92.1M parameters" in titles[0] and "1,229.6M parameters" in titles[1] and "Measured" in titles[2]
    measured = section.data["measured"]
    assert set(measured) == {s.name for s in sharding.SMOKE_SETUPS}
    for name, row in measured.items():
        world = row["setup"]["world"]
        assert len(row["ranks"]) == world and [r["rank"] for r in row["ranks"]] == list(range(world))
        for rank in row["ranks"]:
            assert rank["peak_bytes"] > rank["start_bytes"] > 0
            # a tiny model's peak is mostly the allocator's small blocks: within 2× of the plan either way
            assert 0.5 < rank["peak_bytes"] / row["computed_at_backward"] < 2, name
    plain, sharded = (measured[s.name]["ranks"][0]["start_bytes"] for s in sharding.SMOKE_SETUPS)
    assert sharded < plain  # each of 2 ranks holds about half of the parameters
