"""The T5-bias diagnosis measures each stack's spread over the distances it sees, from a checkpoint."""

import pytest
import torch

from experiments.studies.scan_length.t5_bias import distance_spread, scan_distances, table
from models import ArchConfig
from models.positional import T5RelativeBias
from tests.lit_modules.test_predict import train

ARCH = ArchConfig(d_model=16, n_layers=1, n_heads=2, vocab_size=40, pos_encoding="t5")


def _bias(causal: bool, values: torch.Tensor) -> T5RelativeBias:
    bias = T5RelativeBias(ARCH, causal)
    with torch.no_grad():
        bias.bias.weight.copy_(values)
    return bias


def test_spread_counts_only_the_distances_in_range():
    values = torch.zeros(ARCH.t5_num_buckets, 2)
    values[3, 0] = 2.0  # causal bucket 3: three keys back
    values[10, 1] = -1.5  # ten keys back (a causal stack's buckets are exact below 16)
    assert distance_spread(_bias(True, values), max_distance=3).tolist() == [2.0, 0.0]
    assert distance_spread(_bias(True, values), max_distance=40).tolist() == [2.0, 1.5]


def test_bidirectional_spread_sees_both_directions():
    values = torch.zeros(ARCH.t5_num_buckets, 2)
    values[2, 0] = 1.0  # two keys back
    values[16 + 2, 1] = 0.5  # two keys ahead (the upper half of the buckets)
    assert distance_spread(_bias(False, values), max_distance=2).tolist() == [1.0, 0.5]
    assert distance_spread(_bias(False, values), max_distance=1).tolist() == [0.0, 0.0]


def test_scan_distances():
    assert scan_distances() == {"encoder": 9, "decoder": 48}  # "x around y thrice and ..." : 24 + 24


def _row_spreads(text: str) -> dict[str, tuple[float, float]]:
    """stack -> (largest spread after training, largest at initialisation) from the table's one row."""
    row = next(line for line in text.splitlines() if line.startswith("| split=simple,pos_encoding=t5 | 0 |"))
    cells = [c.strip() for c in row.strip("|").split("|")][2:]
    spreads = [(float(c.split(" / ")[0]), float(c.split("(")[1].split(" / ")[0])) for c in cells]
    return dict(zip(("encoder", "decoder"), spreads))


def test_table_reads_t5_checkpoints_and_compares_with_initialisation(tmp_path):
    run = train("translation", tmp_path / "split=simple,pos_encoding=t5", "--model.arch.pos_encoding=t5", name="seed0")
    ckpt = run / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(ckpt, map_location="cpu", weights_only=False)
    checkpoint["state_dict"]["model.encoder.pos.bias.weight"][0, 0] += 3.0  # distance 0 favoured by 3 nats
    torch.save(checkpoint, ckpt)
    spreads = _row_spreads(table(tmp_path))
    after, before = spreads["encoder"]
    assert before < 0.2  # N(0, 0.02) over 19 distances' buckets
    assert after == pytest.approx(3.0, abs=before + 0.01)
    after, before = spreads["decoder"]  # two warmup steps move it by at most ~1e-4 per entry
    assert after == pytest.approx(before, abs=0.01)


def test_a_sweep_without_t5_checkpoints_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="no T5 run"):
        table(tmp_path)
