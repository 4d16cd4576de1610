"""`make gpu-check`'s CPU dry mode: every part runs end to end on tiny shapes, writes its table and raw JSON,
and a failing part is recorded while the others still run (a lent GPU's minutes are not lost to one bug)."""

from __future__ import annotations

import json

import pytest

from experiments.bench import gpu_check


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu")
    return gpu_check.main(["--dry", "--out", str(out)]), out


def test_every_part_runs_dry_and_is_written(dry_run):
    code, out = dry_run
    assert code == 0
    raw = json.loads((out / "gpu_check-dry.json").read_text())
    assert set(raw["parts"]) == set(gpu_check.PARTS) and not any(p["error"] for p in raw["parts"].values())
    parts = {name: p["result"] for name, p in raw["parts"].items()}
    assert set(parts["throughput"]["families"]) == set(gpu_check.FAMILIES)
    assert all(f["tokens_per_s"] > 0 for f in parts["throughput"]["families"].values())
    assert parts["sdpa"]["rope"]["mask"] is None
    assert all(parts["sdpa"][s]["mask"].startswith("none: a") for s in ("alibi", "t5"))  # no T×T mask
    assert all("blockwise bias (suite)" in parts["sdpa"][s]["kernels"] for s in ("alibi", "t5"))
    bias = parts["score_bias"]
    assert {name.split()[0] for name in bias} == {"alibi", "t5"}
    assert all(row["blockwise"]["s"] > 0 and row["math"]["s"] > 0 for row in bias.values())
    assert all(row["max_grad_diff"] < 1e-2 for row in bias.values())  # bf16 autocast: the two paths agree
    assert all(r["same_tokens"] for r in parts["kv_cache"].values())  # the cache changes speed, not tokens
    fsdp = parts["fsdp"]  # 2 gloo processes in place of 2 GPUs
    assert fsdp["world"] == 2 and fsdp["device"] == "cpu" and list(fsdp["settings"]) == ["off"]
    assert len(fsdp["settings"]["off"]["peak_bytes"]) == 2 and fsdp["settings"]["off"]["computed_at_backward"] > 0
    ladder = parts["ladder"]
    assert ladder["sizes"] == ["d16", "d24", "d32"] and set(ladder["cells"]) == {"pos_encoding=rope"}
    by_size = ladder["cells"]["pos_encoding=rope"]
    assert all(0 < by_size[s]["mean"] < 10 for s in ladder["sizes"])  # a loss per size, read as data
    assert by_size["d16"]["params"] < by_size["d24"]["params"] < by_size["d32"]["params"]
    assert "## Ladder" in (out / ladder["report"]).read_text()
    text = (out / "gpu_check-dry.md").read_text()
    assert all(f"## {name}" in text for name in gpu_check.PARTS)


def test_a_failing_part_is_recorded_and_the_rest_run(monkeypatch, tmp_path):
    def broken(check):
        raise RuntimeError("planted failure")

    monkeypatch.setitem(gpu_check.PARTS, "sdpa", broken)
    assert gpu_check.main(["--dry", "--out", str(tmp_path), "--parts", "sdpa,kv_cache"]) == 1
    raw = json.loads((tmp_path / "gpu_check-dry.json").read_text())
    assert "planted failure" in raw["parts"]["sdpa"]["error"] and raw["parts"]["kv_cache"]["error"] is None


def test_without_cuda_the_full_check_says_so(capsys):
    if gpu_check.torch.cuda.is_available():
        pytest.skip("a GPU is here: the full check would run")
    assert gpu_check.main([]) == 1
    assert "CUDA is not available" in capsys.readouterr().err


def test_fsdp_on_a_node_with_one_gpu_is_skipped_saying_why(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_check.torch.cuda, "device_count", lambda: 1)
    outcome = gpu_check.run_part(gpu_check.FULL, "fsdp", tmp_path, None)
    assert outcome.skipped == "needs a node with ≥ 2 GPUs (FSDP2 over NCCL); this one has 1" and not outcome.error
    assert "Skipped: needs a node with ≥ 2 GPUs" in gpu_check.markdown(gpu_check.DRY, [outcome])


def test_an_unknown_part_names_the_choices(capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(["--dry", "--parts", "sdpa,flash"])
    assert "unknown part(s) ['flash']" in capsys.readouterr().err


def test_a_spent_budget_skips_the_parts_left_and_says_so(tmp_path):
    assert gpu_check.main(["--dry", "--out", str(tmp_path), "--parts", "sdpa,kv_cache", "--budget-s", "0"]) == 0
    raw = json.loads((tmp_path / "gpu_check-dry.json").read_text())
    assert all("budget-s was spent" in raw["parts"][p]["skipped"] for p in ("sdpa", "kv_cache"))
    assert "Skipped: not started" in (tmp_path / "gpu_check-dry.md").read_text()


def test_a_part_that_needs_a_newer_torch_is_skipped_naming_the_version(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_check, "torch_version", lambda: (2, 5))
    assert gpu_check.main(["--dry", "--out", str(tmp_path), "--parts", "score_bias,kv_cache"]) == 0
    parts = json.loads((tmp_path / "gpu_check-dry.json").read_text())["parts"]
    assert parts["score_bias"]["skipped"].startswith("needs torch >= 2.6 (flex_attention")
    assert parts["kv_cache"]["skipped"] is None and parts["kv_cache"]["result"]


def test_each_part_is_written_as_it_ends(monkeypatch, tmp_path):
    def stop(check):
        assert json.loads((tmp_path / "gpu_check-dry.json").read_text())["parts"]["kv_cache"]["result"]
        raise KeyboardInterrupt  # the device call's limit: what ended before is already on disk

    monkeypatch.setitem(gpu_check.PARTS, "sdpa", stop)
    with pytest.raises(KeyboardInterrupt):
        gpu_check.main(["--dry", "--out", str(tmp_path), "--parts", "kv_cache,sdpa"])
    assert "## kv_cache" in (tmp_path / "gpu_check-dry.md").read_text()
