"""The depth_split study's decoding-speed script times every cell of a sweep folder and writes its table."""

import json

import yaml

from experiments.studies.depth_split import decode_speed


def test_decode_speed_times_each_cell(tmp_path, capsys):
    """Runs without checkpoints: each cell's model is built fresh from its run's config.yaml."""
    cells = {"3-3": (3, 3), "5-1": (5, 1)}
    for name, (enc, dec) in cells.items():
        run = tmp_path / name / "seed0"
        run.mkdir(parents=True)
        arch = {"d_model": 16, "n_heads": 2, "n_encoder_layers": enc, "n_decoder_layers": dec, "max_seq_len": 64}
        config = {"data": {"init_args": {"dataset": "scan", "split": "simple", "seed": 0}},
                  "model": {"init_args": {"arch": arch}}}  # fmt: skip
        (run / "config.yaml").write_text(yaml.safe_dump(config))
    sweep = {"cells": [{"name": n, "overrides": {}} for n in cells], "baseline": "3-3"}
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))

    args = [str(tmp_path), "--reps", "1", "--warmup", "0", "--batch", "4", "--beam", "2", "--new-tokens", "3"]
    assert decode_speed.main(args) == 0
    table = (tmp_path / decode_speed.OUTPUT).read_text()
    assert table == capsys.readouterr().out.removesuffix("\n")
    rows = [line for line in table.splitlines() if line.startswith("| 3-3") or line.startswith("| 5-1")]
    assert len(rows) == 2
    assert "1.00× (1.00–1.00)" in rows[0] and "fresh (seed0)" in rows[0]
    assert "4 × 3" in table and "beam 2 tokens/s" in table
