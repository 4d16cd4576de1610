"""The throughput table of a training step (tokens/s, speed against the suite GPT, MFU), built once for the
training section (CPU, fp32) and the GPU script (bf16), so both count FLOPs and utilisation alike.

MFU is tokens/s × FLOPs per token ÷ the matmul peak measured in the same run, with two FLOP counts:
6·N (N the matmul weights, tied head included; Kaplan et al.'s forward + backward estimate) and
6·N plus attention's QKᵀ and AV (3 × the forward count of `flops_per_token`).
"""

from __future__ import annotations

from dataclasses import dataclass

from models.base import TransformerModel

from .tables import Table
from .timing import Timing, ratio_range

SUITE = "suite GPT"  # the row every other model's speed is compared with


@dataclass(frozen=True)
class TrainingFlops:
    """A model's training FLOPs per token, by the two counts of MFU."""

    matmul_params: int
    six_n: float
    with_attention: float

    @classmethod
    def of(cls, model: TransformerModel, seq_len: int) -> TrainingFlops:
        n = model.matmul_parameters()
        return cls(n, 6.0 * n, 3.0 * model.flops_per_token(seq_len, include_attention=True))


def mfu_table(
    times: dict[str, Timing],
    tokens: int,
    flops: TrainingFlops,
    peak_flops: float,
    title: str,
    last_column: tuple[str, dict[str, str]],
) -> tuple[Table, dict[str, dict]]:
    """The table of each model's step time, tokens/s, speed against the suite GPT and MFU, and the same
    numbers per model for the JSON copy.

    Args:
        times: step times by model name; one is `SUITE`.
        tokens: tokens per step.
        flops: the suite GPT's FLOPs per token (every model has its architecture).
        peak_flops: the matmul peak measured in this run (FLOP/s).
        title: the table's title.
        last_column: (header, cell by model name) of a column that only one caller has (SDPA kernel,
            peak memory).
    """
    header, last_cells = last_column
    table = Table(
        ["model", "step time", "tokens/s (median, min–max)", "suite speed ÷ this", "MFU 6·N", "MFU 6·N + attn", header],
        title=title,
    )
    results = {}
    for name, t in times.items():
        rate = t.rate(tokens)
        speedup = ratio_range(t, times[SUITE])
        mfu, mfu_attn = rate.median * flops.six_n / peak_flops, rate.median * flops.with_attention / peak_flops
        table.add(
            name,
            t.fmt("ms"),
            rate.fmt(),
            f"{speedup[0]:.3f} ({speedup[1]:.2f}–{speedup[2]:.2f})",
            f"{mfu:.1%}",
            f"{mfu_attn:.1%}",
            last_cells[name],
        )
        results[name] = {
            "timing": t.to_json(),
            "tokens_per_s": rate.to_json(),
            "mfu_6n": mfu,
            "mfu_6n_attn": mfu_attn,
            "suite_speedup": speedup,
        }
    return table, results
