"""The score-bias grid of the seqlen section: every (heads, threads, T) cell gives both schemes' ratios to `none`."""

import torch

from experiments.bench.common import SMOKE
from experiments.bench.seqlen_bias import bias_grid


def test_bias_grid_covers_every_cell_and_restores_the_threads():
    threads = torch.get_num_threads()
    tables, targets, notes, data = bias_grid(SMOKE)
    assert torch.get_num_threads() == threads
    cells = len(SMOKE.seq_bias_heads) * len(SMOKE.seq_bias_lengths) * len(SMOKE.seq_bias_threads)
    assert len(tables[0].rows) == len(data["cells"]) == cells
    times = [t for t in targets if "step time" in t.name]
    assert len(times) == 2 * cells and all(t.value > 0 and t.threshold == 1.2 for t in times)
    assert {c["T"] for c in data["cells"]} == set(SMOKE.seq_bias_lengths)
    assert all("SDPA forward" in c["none_parts_ms"] for c in data["cells"])
