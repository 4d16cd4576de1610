"""The benchmark runs end to end in smoke mode and writes its report; no test asserts a speed."""

import copy
import json
from pathlib import Path
from typing import get_args

import pytest
import torch
import torch.nn.functional as F

from experiments import bench
from experiments.bench import gpu
from experiments.bench.common import POSITIONAL_SCHEMES, TrainStep
from experiments.bench.reference_gpt import ReferenceGPT
from models import GPT, ArchConfig
from models.config import PosEncoding
from tools import bench as bench_tool


@pytest.fixture(scope="module")
def smoke_report(tmp_path_factory):
    import cli

    out = tmp_path_factory.mktemp("bench")
    code = cli.main(["bench", "--smoke", "--out", str(out)])
    return code, out


def test_smoke_run_writes_every_section(smoke_report):
    code, out = smoke_report
    assert code == 0
    markdown = (out / "bench-smoke.md").read_text()
    report = json.loads((out / "bench-smoke.json").read_text())
    keys = [s["key"] for s in report["sections"]]
    assert keys == list(bench.SECTIONS)
    for section in report["sections"]:
        assert section["error"] is None, section["error"]
        # a section measured only on request (compile) says so instead
        assert section["tables"] or any("not measured" in note for note in section["notes"]), section["key"]
        assert f"## {section['title']}" in markdown
    assert "| Targets" in markdown or "**Targets**" in markdown
    assert report["meta"]["settings"]["smoke"] is True
    assert report["meta"]["peak_flops"] > 0


def test_every_target_has_a_verdict(smoke_report):
    _, out = smoke_report
    report = json.loads((out / "bench-smoke.json").read_text())
    targets = [t for s in report["sections"] for t in s["targets"]]
    names = " ".join(t["name"] for t in targets)
    for needle in (
        "plain reference",
        "transformers GPT-2",
        "MFU",
        "Lightning overhead",
        "no T×T",
        "t5",
        "KV-cache",
        "ViT",
        "per-run overhead",
        "token store",
    ):
        assert needle in names
    assert all(t["verdict"] in ("PASS", "FAIL", "n/a") for t in targets)
    markdown = (out / "bench-smoke.md").read_text()
    assert "PASS" in markdown or "FAIL" in markdown


def test_sections_flag_and_unknown_section(tmp_path, capsys):
    assert bench_tool.main(["--smoke", "--sections", "data", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "bench-smoke.json").read_text())
    assert [s["key"] for s in report["sections"]] == ["data"]
    with pytest.raises(SystemExit):
        bench_tool.main(["--smoke", "--sections", "nope"])


def test_reference_gpt_matches_suite_gpt():
    torch.manual_seed(0)
    cfg = ArchConfig(vocab_size=17, d_model=32, n_layers=2, n_heads=4, max_seq_len=16)
    suite = GPT(cfg).eval()
    reference = ReferenceGPT.like(cfg).load_suite_weights(suite).eval()
    ids = torch.randint(0, 17, (2, 16))
    torch.testing.assert_close(reference(ids), suite(ids))
    with pytest.raises(ValueError):
        ReferenceGPT.like(ArchConfig(pos_encoding="rope"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message printed without CUDA")
def test_gpu_script_explains_missing_cuda(capsys):
    assert gpu.main([]) == 1
    assert "CUDA is not available" in capsys.readouterr().err


def test_positional_schemes_are_the_pos_encoding_choices():
    assert sorted(POSITIONAL_SCHEMES) == sorted(get_args(PosEncoding))
    assert len(POSITIONAL_SCHEMES) == len(set(POSITIONAL_SCHEMES))
    assert POSITIONAL_SCHEMES[0] == "none"  # the baseline row of the bench tables


def test_train_step_is_the_suite_optimizer_step():
    from lit_modules.optim import OptimConfig, build_optimizer

    torch.manual_seed(0)
    model = GPT(ArchConfig(vocab_size=17, d_model=32, n_layers=1, n_heads=2, max_seq_len=8))
    manual = copy.deepcopy(model).train()
    ids = torch.randint(0, 17, (2, 9))
    optim = OptimConfig(lr=1e-2, warmup_steps=0, fused=False)
    step = TrainStep(model, optim, total_steps=10, step_schedule=True, clip_norm=1.0)
    optimizer, schedule = build_optimizer(manual, optim, total_steps=10)
    assert [g["weight_decay"] for g in step.optimizer.param_groups] == [0.1, 0.0]
    for _ in range(2):
        loss = step.on(ids[:, :-1], ids[:, 1:])()
        expected = F.cross_entropy(manual(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
        expected.backward()
        torch.nn.utils.clip_grad_norm_(manual.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        torch.testing.assert_close(loss, expected.detach())
    torch.testing.assert_close(model.state_dict(), manual.state_dict())
    assert all(p.grad is None for p in model.parameters())
    assert step.optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"] < 1e-2
    with pytest.raises(ValueError):
        TrainStep(model, optim, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))


def test_results_go_to_the_committed_folder():
    results = Path(bench.__file__).resolve().parent / "results"  # experiments/bench/results/, as the docs say
    assert bench.DEFAULT_OUT == gpu.DEFAULT_OUT == results
    assert (results / "bench.md").is_file()


def test_checkpointing_section_compares_the_same_model(smoke_report):
    _, out = smoke_report
    report = json.loads((out / "bench-smoke.json").read_text())
    section = next(s for s in report["sections"] if s["key"] == "checkpointing")
    assert [int(d) for d in section["data"]["depths"]] == list(bench.common.SMOKE.ckpt_depths)
    for depth in section["data"]["depths"].values():
        assert depth["same_first_loss"] is True
        assert set(depth["peak_bytes"]) == {"plain", "checkpointed"} and min(depth["peak_bytes"].values()) > 0


def test_decoding_section_times_each_split_at_equal_depth(smoke_report):
    _, out = smoke_report
    report = json.loads((out / "bench-smoke.json").read_text())
    section = next(s for s in report["sections"] if s["key"] == "decoding")
    splits = section["data"]["splits"]
    assert [(v["encoder_layers"], v["decoder_layers"]) for v in splits.values()] == list(bench.common.SMOKE.dec_splits)
    assert len({v["encoder_layers"] + v["decoder_layers"] for v in splits.values()}) == 1
    baseline = splits[next(iter(splits))]
    assert all(r == 1.0 for r in baseline["speedup"]["greedy"])  # the first split is the baseline
    for split in splits.values():
        assert set(split["timing"]) == {"greedy", f"beam {bench.common.SMOKE.dec_beam}", "encode"}
        assert all(t["median_s"] > 0 for t in split["timing"].values())


@pytest.mark.slow  # the smoke run above runs this section too; the fresh/warm figures are checked in make test-all
def test_startup_section_measures_fresh_and_warm_runs(tmp_path):
    """`cli.py bench --smoke --sections startup`: a 1-step sweep run timed as a fresh process and forked
    from the warm process, each finished (the section raises otherwise), with its overhead and CPU time."""
    import cli

    assert cli.main(["bench", "--smoke", "--sections", "startup", "--out", str(tmp_path)]) == 0
    (section,) = json.loads((tmp_path / "bench-smoke.json").read_text())["sections"]
    assert section["key"] == "startup" and section["error"] is None
    data = section["data"]
    assert data["warm_off"] is None  # the warm figures are warm starts, not a fallback
    for start in ("cold", "warm", "first warm"):
        wall, training, overhead = (data[start][k]["samples_s"] for k in ("wall", "training", "overhead"))
        assert len(wall) == 1 and 0 < training[0] < wall[0] and overhead[0] == pytest.approx(wall[0] - training[0])
        assert data[start]["cpu"]["samples_s"][0] > 0
    (target,) = section["targets"]
    assert target["value"] == data["warm"]["overhead"]["median_s"] and target["verdict"] in ("PASS", "FAIL")
