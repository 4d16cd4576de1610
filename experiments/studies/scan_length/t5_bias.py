"""How much word-order signal did T5's relative bias learn? (scan_length study)

With T5 positions the encoder's only word-order signal is a learned scalar per (distance bucket,
head), added to the attention scores and initialised at N(0, init_std), i.e. about zero. A spread
of s nats between a head's most and least favoured distance lets that head weight one position
e^s times another; until it grows, the bidirectional encoder is close to a bag of words. This
reads each T5 run's last checkpoint and prints, per stack, the spread over the distances SCAN
uses (the largest over heads, and the mean), next to the same spread at initialisation.

    python -m experiments.studies.scan_length.t5_bias experiments/studies/scan_length/results/scan_length
"""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

from contract.run_folder import CONFIG_FILE
from datamodules.scan import all_pairs
from experiments.studies import table_script
from lit_modules import Translation
from models.positional import T5RelativeBias, t5_relative_bucket


def distance_spread(bias: T5RelativeBias, max_distance: int) -> torch.Tensor:
    """Per head: max − min of the bias over key − query distances within ±max_distance (only the
    past, 0…max_distance back, in a causal stack)."""
    distances = -torch.arange(max_distance + 1) if bias.causal else torch.arange(-max_distance, max_distance + 1)
    buckets = t5_relative_bucket(distances, not bias.causal, bias.num_buckets, bias.max_distance)
    values = bias.bias.weight.detach()[buckets]  # (distances, heads)
    return values.max(0).values - values.min(0).values


def scan_distances() -> dict[str, int]:
    """The longest key − query distance in SCAN: within a command, within an action sequence
    (one more token than the words: BOS or EOS)."""
    pairs = all_pairs()
    return {
        "encoder": max(len(command.split()) for command, _ in pairs),
        "decoder": max(len(actions.split()) for _, actions in pairs),
    }


def stack_spreads(model: torch.nn.Module, distances: dict[str, int]) -> dict[str, torch.Tensor]:
    return {name: distance_spread(getattr(model, name).pos, distances[name]) for name in distances}


def table(sweep_dir: Path) -> str:
    distances = scan_distances()
    lines = [
        "Spread of the learned T5 bias over the distances SCAN uses (nats; largest over heads / mean; at "
        "initialisation in brackets)",
        "",
        "| cell | seed | encoder | decoder self-attention |",
        "| --- | ---: | ---: | ---: |",
    ]
    pattern = "*pos_encoding=t5*/seed*/checkpoints/last.ckpt"
    for ckpt in sorted(sweep_dir.glob(pattern)):
        run_dir = ckpt.parents[1]
        trained = Translation.load_from_checkpoint(ckpt, map_location="cpu")
        torch.manual_seed(yaml.safe_load((run_dir / CONFIG_FILE).read_text())["seed_everything"])
        initial = Translation(trained.arch, trained.optim, trained.data_info)  # a fresh init, the run's seed
        after, before = stack_spreads(trained.model, distances), stack_spreads(initial.model, distances)
        cells = [
            f"{after[s].max():.2f} / {after[s].mean():.2f} ({before[s].max():.2f} / {before[s].mean():.2f})"
            for s in distances
        ]
        lines.append(f"| {run_dir.parent.name} | {run_dir.name.removeprefix('seed')} | " + " | ".join(cells) + " |")
    if len(lines) == 4:
        raise SystemExit(f"no T5 run with a checkpoint under {sweep_dir} ({pattern}): run the sweep first")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return table_script.run(argv, __doc__, table, "t5_bias.md")


if __name__ == "__main__":
    raise SystemExit(main())
