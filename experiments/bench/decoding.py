"""Decoding speed of the encoder-decoder against how its depth is split between encoder and decoder.

At an equal total number of layers (6-6, 10-2, 11-1), each split decodes the same batch of sources
greedily and with beam search, on the KV cache (`EncoderDecoder.greedy_decode` / `beam_search`): the
encoder runs once per batch, the decoder once per new token, so a deep encoder with a shallow decoder
decodes faster at about the same size (Kasai et al. 2021, "Deep Encoder, Shallow Decoder"). The
splits of one decoding mode are timed interleaved; the speed-up is the baseline's (the first split's)
time over each split's, with its range over paired repetitions. Encoding alone is timed as well, to
show what the deeper encoder costs. Speed only: quality at each split is a training ablation
(`--model.arch.n_encoder_layers` / `n_decoder_layers`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor

from models import EncoderDecoder

from .common import Context
from .tables import Section, Table
from .timing import Timing, interleaved, ratio_range

BOS = 1
# no token is EOS, so every run decodes exactly `dec_new_tokens` steps whatever the random model emits
# (beam search reads column -1 only for finished hypotheses, and none finishes)
NO_EOS = -1


def _split(split: tuple[int, int]) -> str:
    return f"{split[0]}-{split[1]}"


@dataclass(frozen=True)
class DecodeJob:
    """One model and the batch of sources it decodes (its own token ids: BOS, and sources in its vocabulary)."""

    model: EncoderDecoder
    src: Tensor  # (B, S) source ids
    mask: Tensor  # (B, S) 1 = token, 0 = padding
    bos: int


def time_decoding(
    jobs: dict[str, DecodeJob], new_tokens: int, modes: dict[str, int], reps: int, warmup: int = 1
) -> dict[str, dict[str, Timing]]:
    """Seconds per batch of each job, per decoding mode (name -> beam width; 1 is greedy), plus `encode`
    (the encoder alone). Every decode runs on the KV cache and returns exactly `new_tokens` tokens per source:
    no token is EOS. The jobs of one mode are timed interleaved (`interleaved`), `reps` times each after
    `warmup` untimed calls; the tokens/s of a job are `B * new_tokens` over its time."""
    times = {
        mode: interleaved(
            {
                name: functools.partial(job.model.beam_search, job.src, job.mask, job.bos, NO_EOS, new_tokens, beam)
                for name, job in jobs.items()
            },
            reps,
            warmup,
        )
        for mode, beam in modes.items()
    }
    with torch.no_grad():
        times["encode"] = interleaved(
            {name: functools.partial(job.model.encode, job.src, job.mask) for name, job in jobs.items()}, reps, warmup
        )
    return times


def run(ctx: Context) -> Section:
    s = ctx.settings
    section = Section("decoding", "Decoding speed: encoder and decoder depth at equal total depth")
    reps, new = min(s.reps, s.dec_reps), s.dec_new_tokens
    src = torch.randint(2, s.dec_vocab_size, (s.dec_batch, s.dec_src_len), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(src)
    models = {}
    for enc, dec in s.dec_splits:
        torch.manual_seed(0)
        arch = s.arch(
            vocab_size=s.dec_vocab_size,
            n_encoder_layers=enc,
            n_decoder_layers=dec,
            pos_encoding="sinusoidal",  # the translation configs' settings
            activation="relu",
            max_seq_len=max(s.dec_src_len, new + 1),
        )
        models[_split((enc, dec))] = EncoderDecoder(arch).eval()

    modes = {"greedy": 1, f"beam {s.dec_beam}": s.dec_beam}
    jobs = {name: DecodeJob(model, src, mask, BOS) for name, model in models.items()}
    times = time_decoding(jobs, new, modes, reps, s.warmup)

    baseline = next(iter(models))
    work = s.dec_batch * new
    table = Table(
        [
            "encoder-decoder",
            "parameters",
            *(f"{mode} tokens/s" for mode in modes),
            *(f"{mode} speed-up vs {baseline} (paired range)" for mode in modes),
            "encode ms",
        ],
        title=(
            f"d_model {s.d_model}, {s.n_heads} heads, vocab {s.dec_vocab_size}; {s.dec_batch} sources of "
            f"{s.dec_src_len} tokens, {new} tokens decoded each on the KV cache (encoding included), n={reps}; "
            "tokens/s counts the returned tokens of the whole batch"
        ),
    )
    section.data = {"splits": {}, "batch": s.dec_batch, "src_len": s.dec_src_len, "new_tokens": new}
    for name, model in models.items():
        speedups = {mode: ratio_range(times[mode][baseline], times[mode][name]) for mode in modes}
        table.add(
            name,
            f"{model.num_parameters() / 1e6:.2f} M",
            *(times[mode][name].rate(work).fmt() for mode in modes),
            *(f"{r[0]:.2f}× ({r[1]:.2f}–{r[2]:.2f})" for r in speedups.values()),
            f"{times['encode'][name].median * 1e3:.3g}",
        )
        section.data["splits"][name] = {
            "encoder_layers": model.cfg.encoder_layers,
            "decoder_layers": model.cfg.decoder_layers,
            "parameters": model.num_parameters(),
            "timing": {mode: t[name].to_json() for mode, t in times.items()},
            "speedup": speedups,
        }
    section.tables.append(table)
    section.notes.append(
        "Beam search decodes `beam` hypotheses per source and returns the best: its tokens/s counts the "
        "returned tokens. A decoder block has a cross-attention more than an encoder block, so moving "
        "layers to the encoder also lowers the parameter count a little."
    )
    return section
