"""Training-step throughput: the suite's GPT against a plain-PyTorch reference and transformers'
GPT-2 of identical architecture, MFU, the kernel cost of each ablation cell, torch.compile."""

from __future__ import annotations

import copy
import time

import torch
from torch import nn

from models import GPT, far_bias, relative_bias
from models.relative_bias import ScoreMask

from .common import POSITIONAL_SCHEMES, Context, TrainStep, profile_step, token_batch
from .mfu import SUITE, TrainingFlops, mfu_table
from .reference_gpt import ReferenceGPT
from .tables import Section, Table, Target
from .timing import interleaved, paired_detail, ratio_range, time_call


def hf_gpt2(s, activation: str = "gelu_new") -> nn.Module:
    """transformers' GPT2LMHeadModel with the benchmark's dimensions, dropout off, SDPA attention.
    `gelu_new` is GPT-2's own activation (the tanh approximation, as composite ops)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=s.vocab_size,
        n_positions=s.seq_len,
        n_embd=s.d_model,
        n_layer=s.n_layers,
        n_head=s.n_heads,
        activation_function=activation,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return GPT2LMHeadModel(config).train()


def hf_forward(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, use_cache=False).logits


def sdpa_mask_of(model: GPT, T: int) -> str:
    """What the suite's stack passes to SDPA as attn_mask for a length-T forward: `None` means
    SDPA's own causal path (no T×T tensor is built)."""
    x = torch.zeros(1, T, model.cfg.d_model)
    mask, is_causal = model.stack.self_mask(T, 0, None, x)
    if isinstance(mask, ScoreMask) and relative_bias._foldable(x, mask):
        return "None (is_causal=True): the bias folded into q·k, one more feature per head"
    if isinstance(mask, ScoreMask) and far_bias.splittable(x, mask):
        return f"None (is_causal=True) past distance {mask.bias.far}, a band of (H, block, window) below it"
    if isinstance(mask, ScoreMask):
        return f"per block of queries, from a {tuple(mask.bias.per_distance.shape)} bias per distance"
    return f"None (is_causal={is_causal})" if mask is None else f"{tuple(mask.shape)} {str(mask.dtype)[6:]}"


def attention_kernels(model: nn.Module, ids: torch.Tensor, forward=None) -> set[str]:
    """The SDPA kernels a forward + backward of `model` runs (torch.profiler op names)."""

    def step() -> None:
        logits = forward(model, ids) if forward is not None else model(ids)
        logits.sum().backward()
        model.zero_grad(set_to_none=True)

    return profile_step(step)[1]


def run(ctx: Context) -> Section:
    from models.interop import from_reference

    s = ctx.settings
    section = Section("training", "Training step (forward + backward + AdamW)")
    ids, labels = token_batch(s.batch_size, s.seq_len, s.vocab_size)
    tokens = ids.numel()

    # --- the same architecture three ways, the same weights in all three
    hf = hf_gpt2(s)
    suite = from_reference(hf).train()
    reference = ReferenceGPT.like(suite.cfg).load_suite_weights(suite).train()
    hf_fused = hf_gpt2(s, "gelu_pytorch_tanh")
    hf_fused.load_state_dict(hf.state_dict())
    with torch.no_grad():
        logits = suite(ids)
        diff_ref = (reference(ids) - logits).abs().max().item()
        diff_hf = (hf_forward(hf, ids) - logits).abs().max().item()
    section.notes.append(
        f"Same weights in all models (suite built by `models.interop.from_reference(GPT2LMHeadModel)`, "
        f"reference loaded from it): max |logit difference| vs suite: reference {diff_ref:.2e}, "
        f"transformers {diff_hf:.2e}. Architecture: {suite.cfg.n_layers} layers, d_model {suite.cfg.d_model}, "
        f"{suite.cfg.n_heads} heads, vocab {suite.cfg.vocab_size}, seq {s.seq_len}, batch {s.batch_size}, "
        f"GELU tanh (GPT-2's `gelu_new`), fp32, {torch.get_num_threads()} threads."
    )

    candidates = {
        SUITE: TrainStep(suite).on(ids, labels),
        "plain reference GPT": TrainStep(reference).on(ids, labels),
        "transformers GPT-2 (gelu_new)": TrainStep(hf, forward=hf_forward).on(ids, labels),
        "transformers GPT-2 (gelu_pytorch_tanh)": TrainStep(hf_fused, forward=hf_forward).on(ids, labels),
    }
    times = interleaved(candidates, s.reps, s.warmup)
    forwards = {
        SUITE: (suite, None),
        "plain reference GPT": (reference, None),
        "transformers GPT-2 (gelu_new)": (hf, hf_forward),
        "transformers GPT-2 (gelu_pytorch_tanh)": (hf_fused, hf_forward),
    }
    kernels = {name: attention_kernels(model, ids[:2], fwd) for name, (model, fwd) in forwards.items()}

    flops = TrainingFlops.of(suite, s.seq_len)
    table, results = mfu_table(
        times,
        tokens,
        flops,
        ctx.peak_flops,
        title=f"tokens/step {tokens}; N = {flops.matmul_params:,} matmul params (tied head included); "
        f"peak {ctx.peak_flops / 1e9:.1f} GFLOP/s fp32 (measured)",
        last_column=("SDPA kernel", {name: ", ".join(sorted(kernels[name])) or "?" for name in times}),
    )
    section.tables.append(table)
    section.data["models"] = results
    section.data["matmul_params"] = flops.matmul_params
    section.data["flops_per_token_6n"] = flops.six_n
    section.data["flops_per_token_attn"] = flops.with_attention

    def speedup_target(name: str, threshold: float, label: str) -> Target:
        r = ratio_range(times[name], times[SUITE])
        return Target(label, r[0], threshold, detail=paired_detail(r, threshold))

    section.targets += [
        speedup_target("plain reference GPT", 1.0, "suite GPT ÷ plain reference (tokens/s)"),
        speedup_target("transformers GPT-2 (gelu_new)", 1.3, "suite GPT ÷ transformers GPT-2 (tokens/s)"),
        Target(
            "suite GPT MFU (6·N)",
            results[SUITE]["mfu_6n"],
            0.5,
            detail=f"with attention FLOPs: {results[SUITE]['mfu_6n_attn']:.1%}",
        ),
    ]

    # --- the kernel cost of each ablation cell: positional schemes against `none`, RMSNorm against LayerNorm
    cells = {"none / layernorm (baseline)": s.arch(pos_encoding="none")}
    cells |= {f"{p} / layernorm": s.arch(pos_encoding=p) for p in POSITIONAL_SCHEMES if p != "none"}
    cells["none / rmsnorm"] = s.arch(pos_encoding="none", norm="rmsnorm")
    models = {}
    for name, cfg in cells.items():
        torch.manual_seed(0)
        models[name] = GPT(cfg)
    cell_times = interleaved({k: TrainStep(m).on(ids, labels) for k, m in models.items()}, s.reps, s.warmup)
    base = cell_times["none / layernorm (baseline)"]
    cells_table = Table(
        ["pos / norm", "step time", "tokens/s", "× baseline time (paired min–max)", "mask given to SDPA"],
        title="Ablation cells of the suite GPT (GELU exact), each against none / layernorm",
    )
    section.data["cells"] = {}
    for name, t in cell_times.items():
        r = ratio_range(t, base)
        cells_table.add(
            name,
            t.fmt("ms"),
            t.rate(tokens).fmt(),
            f"{r[0]:.3f} ({r[1]:.2f}–{r[2]:.2f})",
            sdpa_mask_of(models[name], s.seq_len),
        )
        section.data["cells"][name] = {"timing": t.to_json(), "time_vs_baseline": r}
    section.tables.append(cells_table)

    # --- torch.compile: steady-state gain and cold-compile cost
    if s.compile and not s.smoke:
        section.data["compile"] = _compile(section, suite, ids, labels, tokens, s)
    else:
        section.notes.append("torch.compile not measured (pass `--compile`; never in smoke mode).")
    return section


def _compile(section: Section, suite: GPT, ids, labels, tokens: int, s) -> dict:
    eager_model = copy.deepcopy(suite)
    compiled_model = torch.compile(copy.deepcopy(suite))
    eager = TrainStep(eager_model).on(ids, labels)
    compiled = TrainStep(compiled_model).on(ids, labels)
    eager()
    eager_step = time_call(eager)
    start = time.perf_counter()
    compiled()  # forward and backward graphs compile here
    cold = time.perf_counter() - start - eager_step
    t = interleaved({"eager": eager, "compiled": compiled}, s.reps, s.warmup)
    r = ratio_range(t["eager"], t["compiled"])
    table = Table(["mode", "step time", "tokens/s"], title="torch.compile on the suite GPT (default mode)")
    for name, timing in t.items():
        table.add(name, timing.fmt("ms"), timing.rate(tokens).fmt())
    section.tables.append(table)
    section.notes.append(
        f"torch.compile: {r[0]:.3f}× the eager throughput (paired {r[1]:.2f}–{r[2]:.2f}) after a cold compile of "
        f"{cold:.1f} s (first step's time minus an eager step; forward + backward graphs)."
    )
    return {"speedup": r, "cold_compile_s": cold, "eager": t["eager"].to_json(), "compiled": t["compiled"].to_json()}
