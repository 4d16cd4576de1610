"""A user's own corpus at scale (`--data.corpus files`, the token store): how fast `cli.py prepare` tokenizes, how
fast the loader serves windows from the store against what a GPU step consumes, how soon the first batch comes,
and whether a run's resident memory stays flat when the corpus is 10x larger.

The corpus is Tiny Shakespeare (`../shared/data`, else the default corpus) copied into 1 MB files up to the size
asked for. The rate a GPU step consumes is that of each family's `gpu.yaml` (batch x sequence tokens per step) at
50% MFU of an H200's dense bf16 peak (989 TFLOP/s): above what the suite's GPU configs reach, so a loader faster
than that is never the bottleneck.
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

from .common import Context
from .tables import Section, Table, Target

ROOT = Path(__file__).resolve().parents[2]
SHARED_TEXT = ROOT.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
GPU_PEAK_BF16 = 989e12  # H100 / H200 SXM, dense bf16 (NVIDIA's datasheet)
ASSUMED_MFU = 0.5
GPU_CONFIGS = {"gpt": "configs/gpt/gpu.yaml", "bert": "configs/bert/gpu.yaml"}  # the families reading a text corpus
FILE_BYTES = 1 << 20


def corpus_text() -> str:
    if SHARED_TEXT.is_file():
        return SHARED_TEXT.read_text(encoding="utf-8")
    from pydoc_data.topics import topics

    return "".join(topics[k] for k in sorted(topics))


def write_corpus(folder: Path, megabytes: float) -> str:
    """About ``megabytes`` of text as 1 MB files in ``folder``; the glob that names them."""
    folder.mkdir(parents=True)
    text = corpus_text()
    total = int(megabytes * (1 << 20))
    for i in range(math.ceil(total / FILE_BYTES)):
        size = min(FILE_BYTES, total - i * FILE_BYTES)
        start = (i * 7919) % max(1, len(text) - size)  # a different stretch in each file
        chunk = (text * (1 + size // len(text) + 1))[start : start + size]
        (folder / f"part{i:04d}.txt").write_text(chunk[: chunk.rfind("\n") + 1] or chunk, encoding="utf-8")
    return str(folder / "part*.txt")


def needed_tokens_per_s(config: str) -> tuple[int, int, float]:
    """(batch, seq_len, tokens/s a step of the config's model consumes at ASSUMED_MFU of GPU_PEAK_BF16)."""
    from models import GPT, ArchConfig
    from models.bert import BertMLM

    raw = yaml.safe_load((ROOT / config).read_text())
    data, arch = raw["data"]["init_args"], raw["model"]["init_args"]["arch"]
    vocab = data.get("bpe_vocab_size", 8192)
    with torch.device("meta"):
        model_class = GPT if "gpt" in config else BertMLM
        model = model_class(ArchConfig(vocab_size=vocab, max_seq_len=data["seq_len"], **{k: v for k, v in arch.items()
                                       if k in ("d_model", "n_layers", "n_heads")}))  # fmt: skip
    train_flops = 3 * model.flops_per_token(data["seq_len"])
    return data["batch_size"], data["seq_len"], GPU_PEAK_BF16 * ASSUMED_MFU / train_flops


def text_datamodule(files: str, cache: Path, **kwargs):
    from datamodules.text import TextDataModule

    return TextDataModule(corpus="files", train_files=files, cache_dir=str(cache), **kwargs)


def loader_rate(files: str, cache: Path, batch: int, seq: int, workers: int, batches: int) -> tuple[float, float]:
    """(seconds from a new DataModule to its first batch, training tokens/s after it) from a built store."""
    start = time.perf_counter()
    dm = text_datamodule(files, cache, seq_len=seq, batch_size=batch, num_workers=workers,
                         eval_lengths=[seq], train_batches_per_epoch=batches + 1)  # fmt: skip
    loader = iter(dm.train_dataloader())
    next(loader)
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(batches):
        next(loader)
    return first, batches * batch * seq / (time.perf_counter() - start)


def peak_rss_mb(files: str, cache: Path, steps: int, out: Path) -> float:
    """The largest resident memory (MB, the run's process and its children) of a tiny GPT trained ``steps`` steps."""
    import psutil

    command = [sys.executable, "cli.py", "fit", "-c", "configs/gpt/base.yaml", "-c", "configs/gpt/tiny.yaml",
               "--data.corpus=files", f"--data.train_files={files}", f"--data.cache_dir={cache}",
               f"--trainer.max_steps={steps}", f"--trainer.val_check_interval={steps}", "--data.val_tokens=4096",
               "--model.sample_tokens=0", "--trainer.enable_progress_bar=false", "--trainer.num_sanity_val_steps=0",
               f"--trainer.logger.init_args.save_dir={out}"]  # fmt: skip
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    watched, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            rss = sum(p.memory_info().rss for p in [watched, *watched.children(recursive=True)])
        except psutil.Error:  # a child that ended between the listing and the reading
            continue
        peak = max(peak, rss)
        time.sleep(0.05)
    if proc.returncode != 0:
        raise RuntimeError(f"the run on {files} failed: {proc.stderr.read()[-2000:]}")
    return peak / 2**20


def run(ctx: Context) -> Section:
    s = ctx.settings
    section = Section("token_store", "A user's own corpus: the token store (prepare, loader, memory)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        small = write_corpus(root / "small", s.store_mb)
        large = write_corpus(root / "large", s.store_mb * s.store_scale)
        prepare = Table(["tokenizer", "corpus", "tokens", "seconds", "tokens/s", "MB/s"],
                        title="`cli.py prepare`: tokenizing into the store (all cores)")  # fmt: skip
        data: dict = {"prepare": {}, "loader": {}, "rss_mb": {}}
        for name, files, kwargs in (("char", large, {}), ("bpe", small, {"tokenizer": "bpe", "bpe_vocab_size": 4096,
                                    "tokenizer_sample_bytes": min(2 << 20, int(s.store_mb * (1 << 20)))})):  # fmt: skip
            start = time.perf_counter()
            dm = text_datamodule(files, root / "cache", **kwargs)
            dm.prepare_data()
            seconds = time.perf_counter() - start
            tokens = sum(dm.prepared_store.manifest["tokens"].values())
            megabytes = sum(p.stat().st_size for p in Path(files).parent.glob("*.txt")) / 2**20
            prepare.add(name, f"{megabytes:.0f} MB", f"{tokens:,}", f"{seconds:.1f}", f"{tokens / seconds:,.0f}",
                        f"{megabytes / seconds:.1f}")  # fmt: skip
            data["prepare"][name] = {"tokens": tokens, "seconds": seconds, "megabytes": megabytes}
        section.tables.append(prepare)
        text_datamodule(small, root / "cache").prepare_data()

        loader = Table(["config", "batch x seq", "workers", "first batch (s)", "tokens/s", "a GPU step needs",
                        "headroom"], title="Windows from the store vs a GPU step's consumption")  # fmt: skip
        headroom = math.inf
        for family, config in GPU_CONFIGS.items():
            batch, seq, needed = needed_tokens_per_s(config)
            if s.smoke:
                batch, seq = 2, 16
            for workers in (0, 2):
                first, rate = loader_rate(large, root / "cache", batch, seq, workers, s.loader_batches)
                loader.add(config, f"{batch} x {seq}", workers, f"{first:.2f}", f"{rate:,.0f}", f"{needed:,.0f}",
                           f"{rate / needed:.1f}x")  # fmt: skip
                data["loader"][f"{family}/{workers}"] = {"first_s": first, "tokens_per_s": rate, "needed": needed}
                if workers == 2:
                    headroom = min(headroom, rate / needed)
        section.tables.append(loader)

        memory = Table(["corpus", "training tokens", "peak RSS (MB), each run", "a tensor of its tokens (MB)"],
                       title=f"Resident memory of a tiny GPT run ({s.rss_steps} steps) from the store; the lowest "
                             f"of {s.rss_reps} interleaved runs is compared (a peak varies by ~50 MB)")  # fmt: skip
        sizes = {"1x": small, f"{s.store_scale}x": large}
        peaks: dict[str, list[float]] = {name: [] for name in sizes}
        for rep in range(s.rss_reps):
            for name, files in sizes.items():
                peaks[name].append(peak_rss_mb(files, root / "cache", s.rss_steps, root / f"runs_{name}_{rep}"))
        for name, files in sizes.items():
            tokens = len(text_datamodule(files, root / "cache")._data.train_ids)
            memory.add(f"{name} ({Path(files).parent.name})", f"{tokens:,}", ", ".join(f"{p:.0f}" for p in peaks[name]),
                       f"{tokens * 8 / 2**20:.0f}")  # fmt: skip
            data["rss_mb"][name] = min(peaks[name])
        section.tables.append(memory)
    growth = data["rss_mb"][f"{s.store_scale}x"] / data["rss_mb"]["1x"]
    section.targets += [
        Target("token store: loader tokens/s (2 workers) ÷ a GPU step's (gpu.yaml, 50% MFU of an H200)", headroom, 1.0,
               detail="the loader is never the bottleneck"),
        Target(f"token store: peak RSS with a {s.store_scale}x corpus ÷ with 1x", growth, 1.05, higher_is_better=False,
               detail="resident memory does not grow with the corpus"),
    ]  # fmt: skip
    section.notes.append(
        f"Corpus: {'Tiny Shakespeare' if SHARED_TEXT.is_file() else 'the default corpus'} in 1 MB files; prepare's "
        "BPE is fitted on a 2 MB sample. The tokens/s a GPU step needs: 989 TFLOP/s x 0.5 / (3 x the model's "
        "forward FLOPs per token)."
    )
    section.data = data
    return section
