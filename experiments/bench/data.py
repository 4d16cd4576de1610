"""Data loading: the share of a training step spent waiting for the text DataModule's next batch
(the suite's default: `TextDataModule`, default corpus, character tokenizer, num_workers 0)."""

from __future__ import annotations

import time

import torch

from models import GPT

from .common import Context, TrainStep
from .tables import Section, Table
from .timing import Timing


def run(ctx: Context) -> Section:
    from datamodules.text import TextDataModule

    s = ctx.settings
    section = Section("data", "Data loading (TextDataModule) vs the training step")
    start = time.perf_counter()
    dm = TextDataModule(seq_len=s.seq_len, batch_size=s.batch_size)
    dm.prepare_data()
    prepare = time.perf_counter() - start
    torch.manual_seed(0)
    train_step = TrainStep(GPT(s.arch(vocab_size=dm.vocab_size)))
    batches = iter(dm.train_dataloader())

    def step(batch: dict) -> None:
        train_step(batch["input_ids"], batch["labels"])

    for _ in range(max(1, s.warmup)):
        step(next(batches))
    wait, compute = Timing(), Timing()
    for _ in range(s.data_steps):
        t0 = time.perf_counter()
        batch = next(batches)
        t1 = time.perf_counter()
        step(batch)
        t2 = time.perf_counter()
        wait.samples.append(t1 - t0)
        compute.samples.append(t2 - t1)
    share = sum(wait.samples) / (sum(wait.samples) + sum(compute.samples))
    table = Table(
        ["part", "time per step (median, min–max)"],
        title=f"{s.data_steps} steps, batch {s.batch_size} × seq {s.seq_len}, num_workers {dm.num_workers}, "
        f"vocab {dm.vocab_size}",
    )
    table.add("next(iter(train_dataloader))", wait.fmt("ms"))
    table.add("training step (fwd + bwd + AdamW)", compute.fmt("ms"))
    table.add("share of step time waiting on data", f"{share:.2%}")
    section.tables.append(table)
    section.notes.append(f"Building the DataModule (reading and tokenizing the corpus) took {prepare:.2f} s once.")
    section.data = {"wait": wait.to_json(), "step": compute.to_json(), "share": share, "prepare_s": prepare}
    return section
