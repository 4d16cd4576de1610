"""stream_at_init: the residual stream's RMS and growth at the first probed step, from synthetic runs' events."""

import csv

import pytest

from experiments.studies import stream_at_init
from tests.experiments.studies.readme_figures import ROOT


def probe(first: float, last: float, growth: float, blocks: int = 11) -> dict:
    """A run's diagnostics at steps 0 and 100 (only step 0 is read): `blocks` blocks, block10 the last."""
    tags = {f"diagnostics/residual_rms/block{i}": {0: first if i == 0 else 0.5, 100: 9.0} for i in range(blocks)}
    tags[f"diagnostics/residual_rms/block{blocks - 1}"] = {0: last, 100: 9.0}
    return tags | {"diagnostics/residual_growth": {0: growth, 100: 1.0}, "val/loss": {999: 2.0}}


@pytest.fixture
def sweep_dir(write_sweep):
    runs = {
        "norm=dyt": {0: probe(1.0, 1.0, 0.0), 1: probe(1.02, 1.02, 0.0002)},
        "norm=layernorm": {0: probe(0.031, 0.034, 0.0880)},
        "norm=unprobed": {0: {"val/loss": {999: 2.0}}},  # a run without the Diagnostics callback: not read
        "norm=dyt~lr=0.01": {10: probe(5.0, 5.0, 5.0)},  # a search run: not a final one
    }
    folder = write_sweep(runs)
    rows = list(csv.DictReader((folder / "results.csv").open()))
    with (folder / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, [*rows[0], "phase"])
        writer.writeheader()
        writer.writerows(row | {"phase": "search" if "~" in row["cell"] else "final"} for row in rows)
    return folder


def test_the_first_and_last_block_at_the_first_probed_step(sweep_dir):
    text = stream_at_init.table(sweep_dir)
    # block10 is the last block (ordered by number, not as text), and step 100's values are not read
    assert "| norm=dyt | 2 | 1.0100 ± 0.0141 | 1.0100 ± 0.0141 | 0.0001 ± 0.0001 |" in text
    assert "| norm=layernorm | 1 | 0.0310 | 0.0340 | 0.0880 |" in text
    assert "unprobed" not in text and "lr=0.01" not in text


def test_main_writes_the_table_next_to_the_ledger(sweep_dir, capsys):
    assert stream_at_init.main([str(sweep_dir)]) == 0
    assert (sweep_dir / "stream_at_init.md").read_text() in capsys.readouterr().out


def test_a_sweep_without_probes_is_refused(write_sweep):
    with pytest.raises(SystemExit, match="no finished final run logged diagnostics/residual_growth"):
        stream_at_init.table(write_sweep({"a": {0: {"val/loss": {9: 2.0}}}}))


COMMITTED = sorted(ROOT.glob("experiments/studies/*/results/*/stream_at_init.md"))


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_a_committed_table_is_what_the_script_gives_now(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the table names the folder as the README's command gives it, from the root
    assert stream_at_init.table(path.parent.relative_to(ROOT)) == path.read_text()
