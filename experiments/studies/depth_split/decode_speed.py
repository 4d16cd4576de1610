"""Decoding speed of each depth split's trained model (depth_split study; Kasai et al. 2021).

For each cell of a depth_split sweep folder, one run's model (the lowest seed that has
`checkpoints/last.ckpt`; a model built fresh from the run's `config.yaml` when no run kept one: at a fixed
output length the speed does not depend on the weights) decodes the first `--batch` sources of SCAN's test
split (the run's own data and vocabulary) greedily and with beam search, on the KV cache, with `--threads`
torch threads. No token ends a hypothesis, so every decode returns exactly `--new-tokens` tokens per source
(default: the batch's longest reference plus its EOS, the steps a batch decode that stops at EOS would take
when every hypothesis ends where its reference does). The cells are timed interleaved, `--reps` times each
(median; range in brackets), by the benchmark's own function (`experiments.bench.decoding.time_decoding`);
the speed-up is the baseline's time over each cell's (ratio of medians, range over paired repetitions).
Writes `decode_speed.md` into the sweep folder and prints it.

    python -m experiments.studies.depth_split.decode_speed experiments/studies/depth_split/results/depth_split
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from contract.files import write_atomic
from contract.run_folder import CONFIG_FILE, last_checkpoint
from datamodules.translation import TranslationDataModule
from experiments.bench.decoding import DecodeJob, time_decoding
from experiments.bench.tables import Table
from experiments.bench.timing import Rate, machine_info, ratio_range
from lit_modules import Translation
from lit_modules.suite_cli import describe_data
from models import ArchConfig
from models.config import IGNORE_INDEX

OUTPUT = "decode_speed.md"


@dataclass(frozen=True)
class CellModel:
    """The model a cell is timed with, and where it came from."""

    cell: str
    run: Path
    translation: Translation
    trained: bool  # weights from the run's checkpoint; False: built fresh from its config.yaml
    data: TranslationDataModule


def rate_text(rate: Rate) -> str:
    return f"{rate.median:,.0f} ({rate.low:,.0f}–{rate.high:,.0f})"


def run_dirs(cell_dir: Path) -> list[Path]:
    """The cell's run folders with a `config.yaml`, lowest seed first."""
    runs = [p for p in cell_dir.glob("seed*") if (p / CONFIG_FILE).is_file()]
    return sorted(runs, key=lambda p: int(p.name.removeprefix("seed")))


def load_cell(sweep_dir: Path, cell: str) -> CellModel:
    runs = run_dirs(sweep_dir / cell)
    if not runs:
        raise FileNotFoundError(f"{sweep_dir / cell}: no run folder with a config.yaml; run the sweep first")
    trained = [run for run in runs if last_checkpoint(run).is_file()]
    run = (trained or runs)[0]
    config = yaml.safe_load((run / CONFIG_FILE).read_text())
    data = TranslationDataModule(**config["data"]["init_args"])
    if trained:
        translation = Translation.load_from_checkpoint(last_checkpoint(run), map_location="cpu")
    else:
        torch.manual_seed(0)
        arch = ArchConfig(**config["model"]["init_args"]["arch"])
        translation = Translation(arch=arch, data_info=describe_data(data))
    return CellModel(cell, run, translation.eval(), bool(trained), data)


def source_batch(data: TranslationDataModule, size: int) -> dict:
    """The first `size` pairs of the test split, collated as in evaluation."""
    data.batch_size = size
    batch = next(iter(data.test_dataloader()))
    if len(batch["tgt_text"]) < size:
        raise ValueError(f"the test split has {len(batch['tgt_text'])} pairs, fewer than --batch {size}")
    return batch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path, help="a depth_split sweep folder (with sweep.json)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--batch", type=int, default=64, help="source sentences per batch (default 64)")
    parser.add_argument("--beam", type=int, default=4, help="beam width (default 4)")
    parser.add_argument("--reps", type=int, default=7, help="timed repetitions per cell and mode (default 7)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls per cell and mode first (default 1)")
    parser.add_argument("--new-tokens", type=int, help="tokens decoded per source (default: longest reference + 1)")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    sweep = json.loads((args.sweep_dir / "sweep.json").read_text())
    cells = [load_cell(args.sweep_dir, c["name"]) for c in sweep["cells"]]
    batches = {c.cell: source_batch(c.data, args.batch) for c in cells}
    longest = max(int((b["tgt_out"] != IGNORE_INDEX).sum(1).max()) for b in batches.values())  # target + EOS
    new_tokens = args.new_tokens or longest
    jobs = {}
    for c in cells:
        batch = batches[c.cell]
        jobs[c.cell] = DecodeJob(c.translation.model, batch["src_ids"], batch["src_mask"], c.translation.bos_id)
    modes = {"greedy": 1, f"beam {args.beam}": args.beam}
    times = time_decoding(jobs, new_tokens, modes, args.reps, args.warmup)

    baseline = sweep.get("baseline") or cells[0].cell
    work = args.batch * new_tokens
    table = Table(
        [
            "split (encoder-decoder)",
            "parameters",
            *(f"{mode} tokens/s" for mode in modes),
            *(f"{mode} speed-up vs {baseline}" for mode in modes),
            "encode ms",
            "model",
        ]
    )
    for c in cells:
        speedups = [ratio_range(times[mode][baseline], times[mode][c.cell]) for mode in modes]
        table.add(
            c.cell,
            f"{c.translation.model.num_parameters() / 1e6:.3f} M",
            *(rate_text(times[mode][c.cell].rate(work)) for mode in modes),
            *(f"{r[0]:.2f}× ({r[1]:.2f}–{r[2]:.2f})" for r in speedups),
            f"{times['encode'][c.cell].median * 1e3:.3g}",
            f"{'trained' if c.trained else 'fresh'} ({c.run.name})",
        )
    machine = machine_info()
    lengths = batches[cells[0].cell]["src_mask"].sum(1)
    text = "\n".join(
        [
            f"# Decoding speed of each depth split ({args.sweep_dir.name})",
            "",
            f"`python -m experiments.studies.depth_split.decode_speed {args.sweep_dir}`"
            + (f" (--threads {args.threads} --batch {args.batch} --beam {args.beam} --reps {args.reps})"),
            "",
            f"{args.batch} sources of SCAN's test split (the first of the run's data; {int(lengths.min())}–"
            f"{int(lengths.max())} tokens), {new_tokens} tokens decoded for each on the KV cache, encoding included "
            f"(no token ends a hypothesis: every decode has the same length); tokens/s counts the returned tokens "
            f"of the whole batch, {args.batch} × {new_tokens}: median of {args.reps} interleaved repetitions "
            f"(range); speed-up: {baseline}'s time over the split's (ratio of medians; range over paired "
            f"repetitions). Model: `trained` is the run's last checkpoint, `fresh` a model built from the run's "
            f"config.yaml (no checkpoint kept).",
            "",
            table.markdown(),
            "",
            f"Machine: {machine['cpu']}, {machine['cpu_count']} CPUs, torch {machine['torch']} with "
            f"{machine['torch_threads']} thread(s); load average at the end "
            f"{', '.join(f'{x:.2f}' for x in machine['load_average'] or ())}.",
            "",
        ]
    )
    write_atomic(args.sweep_dir / OUTPUT, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
