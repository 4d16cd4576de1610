"""Lightning overhead: the suite's `CausalLM` under a `Trainer` against a plain training loop.

Both train the same GPT (same initial weights) on batches from the same `TextDataModule`, with
what the suite's runs do every step: the suite's fused AdamW, the warmup-cosine schedule stepped
per step, gradient-norm clipping at 1.0 and `deterministic=True` (configs/gpt/base.yaml). The
Trainer logs as the suite configures it (TensorBoardLogger to a temporary folder,
log_every_n_steps 10, the suite's DivergenceGuard and RunMetadata callbacks) and has no
checkpointing, progress bar, model summary or validation.

Interleaving: a callback runs a chunk of plain-loop steps at every chunk boundary of the
Trainer's loop, so repetition r times `chunk` plain steps and then `chunk` Lightning steps under
the same machine load. A Lightning chunk is the time from one chunk boundary (a batch start) to
the next, which covers everything Lightning does per step: fetching the batch, hooks, logging,
clipping, the optimiser and scheduler. A plain chunk covers the same work in a `for` loop. With a
chunk of 10 steps every chunk holds exactly one logging step.
"""

from __future__ import annotations

import tempfile
import time

import torch

from models import GPT

from .common import Context, TrainStep
from .tables import Section, Table, Target
from .timing import Timing


def run(ctx: Context) -> Section:
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import TensorBoardLogger

    from datamodules.text import TextDataModule
    from lit_modules import CausalLM, DivergenceGuard, OptimConfig, RunMetadata
    from lit_modules.suite_cli import describe_data

    s = ctx.settings
    section = Section("lightning", "Lightning overhead (CausalLM + Trainer vs a plain loop)")
    dm = TextDataModule(seq_len=s.seq_len, batch_size=s.batch_size)
    dm.prepare_data()
    chunk, reps, warmup = s.lightning_chunk, s.lightning_reps, max(1, s.warmup)
    max_steps = warmup + reps * chunk + 1
    optim = OptimConfig()

    torch.manual_seed(0)
    lit = CausalLM(s.arch(), optim, data_info=describe_data(dm), sample_tokens=0)
    plain = GPT(lit.arch)
    plain.load_state_dict(lit.model.state_dict())
    # what CausalLM's training step does: the same optimiser, schedule stepped per step, clipping at 1.0
    step = TrainStep(plain, optim, total_steps=max_steps, step_schedule=True, clip_norm=1.0)
    batches = iter(dm.train_dataloader())

    def plain_steps(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            batch = next(batches)
            loss = step(batch["input_ids"], batch["labels"])
            float(loss)  # the plain loop looks at its loss too (Lightning's DivergenceGuard does)
        return time.perf_counter() - start

    plain_t, lightning_t = Timing(), Timing()
    marks: dict[str, float] = {}

    class Interleave(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            now = time.perf_counter()
            step = trainer.global_step
            if step == 0:
                marks["first_batch"] = now
            if step < warmup or (step - warmup) % chunk:
                return
            if "chunk" in marks:
                lightning_t.samples.append((now - marks["chunk"]) / chunk)
            if len(plain_t.samples) < reps:
                plain_t.samples.append(plain_steps(chunk) / chunk)
            marks["chunk"] = time.perf_counter()

    was_deterministic = torch.are_deterministic_algorithms_enabled()
    plain_steps(warmup)  # warm the plain loop before its first timed chunk
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=1,
            max_steps=max_steps,
            logger=TensorBoardLogger(tmp, default_hp_metric=False),
            log_every_n_steps=10,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            gradient_clip_val=1.0,
            deterministic=True,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            callbacks=[DivergenceGuard(), RunMetadata(), Interleave()],
        )
        trainer.fit(lit, datamodule=dm)
        startup = marks["first_batch"] - start  # Trainer(...) and fit() up to the first batch
    torch.use_deterministic_algorithms(was_deterministic)

    tokens = s.batch_size * s.seq_len
    overhead = lightning_t.median / plain_t.median - 1
    pairs = [a / b - 1 for a, b in zip(lightning_t.samples, plain_t.samples)]
    table = Table(
        ["loop", "time per step", "tokens/s"],
        title=f"{reps} interleaved chunks of {chunk} steps after {warmup} warm-up step(s); "
        f"batch {s.batch_size} × seq {s.seq_len}",
    )
    table.add("plain loop", plain_t.fmt("ms"), plain_t.rate(tokens).fmt())
    table.add("CausalLM + Trainer", lightning_t.fmt("ms"), lightning_t.rate(tokens).fmt())
    section.tables.append(table)
    section.targets.append(
        Target(
            f"Lightning overhead per step at batch {s.batch_size}",
            overhead,
            0.03,
            higher_is_better=False,
            detail=f"paired chunks {min(pairs):+.1%}…{max(pairs):+.1%}",
        )
    )
    section.notes.append(
        f"Lightning's one-off start (Trainer construction + fit() up to the first batch: callbacks, logger, "
        f"dataloader) took {startup:.2f} s; it is not in the per-step figures."
    )
    section.data = {
        "plain": plain_t.to_json(),
        "lightning": lightning_t.to_json(),
        "overhead": overhead,
        "paired_overheads": pairs,
        "startup_s": startup,
        "chunk_steps": chunk,
        "vocab_size": dm.vocab_size,
    }
    return section
