"""The per-family torch.compile section: every family trains through the same step it times."""

import dataclasses

import torch

from experiments.bench import compile as compile_section
from experiments.bench.common import SMOKE, Context, TrainStep


def test_every_family_takes_a_training_step():
    families = compile_section._families(SMOKE)
    assert set(families) == {"gpt", "bert", "translation", "vit"}
    for name, (model, forward, inputs, targets) in families.items():
        before = [p.detach().clone() for p in model.parameters()]
        loss = TrainStep(model, forward=forward)(inputs, targets)
        assert torch.isfinite(loss), name
        assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters())), name


def test_break_even_is_cold_compile_over_the_time_saved(monkeypatch):
    class Timing:
        def __init__(self, median):
            self.median = median

    monkeypatch.setattr(compile_section, "time_call", lambda fn: 0.5)  # an eager step
    monkeypatch.setattr(compile_section, "_seconds", lambda fn: 2.0)  # the first compiled step
    steady = {"eager": Timing(0.3), "compiled": Timing(0.2)}
    monkeypatch.setattr(compile_section, "interleaved", lambda steps, reps, warmup: steady)
    monkeypatch.setattr(compile_section, "ratio_range", lambda a, b: (1.5, 1.4, 1.6))
    monkeypatch.setattr(compile_section.torch, "compile", lambda model: model)
    model, forward, inputs, targets = compile_section._families(SMOKE)["gpt"]
    r = compile_section._measure(model, forward, inputs, targets, SMOKE)
    # cold = 2.0 - eager step 0.5 = 1.5 s; saved 0.1 s per step
    assert abs(r["cold_compile_s"] - 1.5) < 1e-9 and abs(r["break_even_steps"] - 15) < 1e-6


def test_not_measured_without_compile():
    section = compile_section.run(Context(dataclasses.replace(SMOKE, compile=False), peak_flops=1.0))
    assert not section.tables and "not measured" in section.notes[0]
