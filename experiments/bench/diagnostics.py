"""The training diagnostics' cost: how much a probed step (`lit_modules.diagnostics_callbacks.Diagnostics`) takes beyond
an unprobed one, and what that costs at the default period.

One `CausalLM` run under a `Trainer` configured as the suite's runs are (TensorBoard, DivergenceGuard,
RunMetadata, LossSpikes), with the diagnostics every `diag_period` steps and their heatmaps every second probe,
so unprobed steps, probed steps and probed steps with heatmaps alternate under the same machine load. A step's
time runs from its batch start to the next one's: it holds the probes' recomputed attention, the gradient norms,
the gather and the TensorBoard writes. The first probed step (matplotlib's import) and the warm-up are left out.

    overhead at the defaults = (probe's extra + heatmaps' extra × 100/500) / (100 × median unprobed step)
"""

from __future__ import annotations

import statistics
import tempfile
import time

import torch

from .common import Context
from .tables import Section, Table, Target
from .timing import Timing

DEFAULT_PERIOD, DEFAULT_HEATMAPS = 100, 500  # Diagnostics' defaults: the target's figure


def run(ctx: Context) -> Section:
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import TensorBoardLogger

    from datamodules.text import TextDataModule
    from lit_modules import CausalLM, DivergenceGuard, OptimConfig, RunMetadata
    from lit_modules.diagnostics_callbacks import Diagnostics, LossSpikes
    from lit_modules.suite_cli import describe_data

    s = ctx.settings
    section = Section("diagnostics", "Training diagnostics: the cost of a probed step")
    period, reps = s.diag_period, s.diag_reps
    max_steps = 2 * period * (reps + 1) + 1  # probes at 0, period, ...; heatmaps at every second
    dm = TextDataModule(seq_len=s.seq_len, batch_size=s.batch_size)
    dm.prepare_data()
    torch.manual_seed(0)
    lit = CausalLM(s.arch(), OptimConfig(), data_info=describe_data(dm), sample_tokens=0)
    starts: list[float] = []

    class Clock(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            starts.append(time.perf_counter())

    was_deterministic = torch.are_deterministic_algorithms_enabled()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = pl.Trainer(
            accelerator="cpu", devices=1, max_steps=max_steps, logger=TensorBoardLogger(tmp, default_hp_metric=False),
            log_every_n_steps=10, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
            gradient_clip_val=1.0, deterministic=True, limit_val_batches=0, num_sanity_val_steps=0,
            callbacks=[Clock(), DivergenceGuard(), RunMetadata(), LossSpikes(), Diagnostics(period, 2 * period)],
        )  # fmt: skip
        trainer.fit(lit, datamodule=dm)
    torch.use_deterministic_algorithms(was_deterministic)

    steps = {step: b - a for step, (a, b) in enumerate(zip(starts, starts[1:]))}
    probed = Timing([t for step, t in steps.items() if step and step % (2 * period) == period])
    drawn = Timing([t for step, t in steps.items() if step and step % (2 * period) == 0])
    plain = Timing([t for step, t in steps.items() if step > 1 and step % period])
    extra, drawing = probed.median - plain.median, drawn.median - probed.median
    overhead = (extra + drawing * DEFAULT_PERIOD / DEFAULT_HEATMAPS) / (DEFAULT_PERIOD * plain.median)
    spikes = LossSpikes()
    start = time.perf_counter()
    for step in range(1000):
        spikes.observe(step, 3.0 + 0.01 * (step % 7))
    spike_cost = (time.perf_counter() - start) / 1000

    table = Table(
        ["step", "time per step"],
        title=f"GPT d={s.d_model}, {s.n_layers} layers; batch {s.batch_size} × seq {s.seq_len}; "
        f"diagnostics every {period} steps, heatmaps every {2 * period}",
    )
    table.add("unprobed", plain.fmt("ms"))
    table.add("probed (scalars)", probed.fmt("ms"))
    table.add("probed, with the heatmaps", drawn.fmt("ms"))
    table.add("a probe's extra time", f"{extra * 1e3:.3g} ms ({extra / plain.median:+.1%} of a step)")
    table.add("the heatmaps' extra time", f"{drawing * 1e3:.3g} ms ({drawing / plain.median:+.1%} of a step)")
    section.tables.append(table)
    section.targets.append(
        Target(
            f"diagnostics overhead at the defaults (every {DEFAULT_PERIOD} steps, heatmaps every {DEFAULT_HEATMAPS})",
            overhead,
            0.03,
            higher_is_better=False,
            detail=f"probe +{extra * 1e3:.3g} ms, heatmaps +{drawing * 1e3:.3g} ms, "
            f"on {plain.median * 1e3:.3g} ms steps",
        )
    )
    section.notes.append(
        f"The loss-spike rule runs every step: {spike_cost * 1e6:.3g} µs a step "
        f"({spike_cost / plain.median:.2%} of one)."
    )
    section.data = {
        "period": period,
        "probed": probed.to_json(),
        "probed_with_heatmaps": drawn.to_json(),
        "heatmaps_extra_s": drawing,
        "unprobed": plain.to_json(),
        "extra_s": extra,
        "overhead_at_default": overhead,
        "spike_rule_s": spike_cost,
        "step_times_s": [steps[k] for k in sorted(steps)],
        "median_all_s": statistics.median(steps.values()),
    }
    return section
