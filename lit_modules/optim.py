"""Optimiser and schedule shared by every task."""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

import torch
from torch import nn

from models.base import TransformerModel
from models.config import ConfigError
from models.positional import PositionalScheme

from .schedules import SCHEDULES, DecayShape, Schedule, ScheduleSettings, warmup_cosine  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class OptimConfig:
    """AdamW with linear warmup then a decay of `schedule` (`lit_modules.schedules`) to `final_lr_fraction`·lr.

    Args:
        lr: peak learning rate.
        weight_decay: applied to Linear/Conv weight matrices only (not norms, biases, embeddings).
        betas: Adam betas.
        eps: Adam epsilon.
        warmup_steps: linear warmup length; 0 starts at the peak (the Post-Norm/warmup study).
        schedule: `cosine` (to the end), `wsd` (warmup-stable-decay: the peak held, then a decay over the last
            `decay_fraction` of the steps), `constant` or `linear` (`lit_modules.schedules`).
        decay_fraction: `wsd`'s share of the run spent decaying (Hägele et al. 2024: 0.2).
        decay_shape: `wsd`'s decay: `linear`, `cosine` or `1-sqrt` (Hägele et al. 2024's cooldown).
        final_lr_fraction: where every decay ends, as a fraction of lr; `None` means `min_lr_ratio`.
        min_lr_ratio: the older name of `final_lr_fraction` (committed runs' configs carry it), used when that is unset.
        positional_lr_scale: learning-rate multiplier of the positional scheme's own parameters (learned
            position tables, T5 relative-bias tables), which are not decayed either. A learned scalar moves
            under Adam by at most about lr per step whatever its gradient, so at a transformer's lr a T5
            bias table gains little contrast in a short run (T5 trained it with Adafactor at lr 1e-2);
            1 keeps one learning rate for every parameter.
        z_loss: coefficient of PaLM's auxiliary loss z·log²Z on the output softmax's normaliser Z, averaged over
            the labelled positions (Chowdhery et al. 2022: 1e-4; Wortsman et al. 2023's fix for output-logit
            divergence); 0 is off. Logged as `train/z_loss`; `train/loss` stays the cross-entropy alone.
        fused: fused AdamW kernel (exact; one kernel per step instead of a loop over tensors) in
            full or pure half precision; under mixed precision (`16-mixed`, `bf16-mixed`) the
            foreach implementation runs instead (see `adamw_kernel`). False: torch's default.
    """

    lr: float = 1e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    warmup_steps: int = 100
    schedule: Schedule = "cosine"
    decay_fraction: float = 0.2
    decay_shape: DecayShape = "1-sqrt"
    final_lr_fraction: float | None = None
    min_lr_ratio: float = 0.1
    positional_lr_scale: float = 1.0
    z_loss: float = 0.0
    fused: bool = True

    def __post_init__(self) -> None:
        for name, literal in (("schedule", Schedule), ("decay_shape", DecayShape)):
            if getattr(self, name) not in get_args(literal):
                choices = ", ".join(map(repr, get_args(literal)))
                raise ConfigError(f"{name}={getattr(self, name)!r} is not valid; choose one of {choices}")
        if not 0 < self.decay_fraction <= 1:
            raise ConfigError(f"decay_fraction={self.decay_fraction} must be in (0, 1] (Hägele et al.: 0.2)")
        if not 0 <= self.final <= 1:
            raise ConfigError(f"final_lr_fraction={self.final} must be in [0, 1] (a fraction of lr)")
        if self.z_loss < 0:
            raise ConfigError(f"z_loss={self.z_loss} must be 0 (off) or positive (PaLM: 1e-4)")
        if not self.positional_lr_scale > 0:
            raise ConfigError(f"positional_lr_scale={self.positional_lr_scale} must be positive (1: the model's lr)")

    @property
    def final(self) -> float:
        """The fraction of lr every decay ends at."""
        return self.min_lr_ratio if self.final_lr_fraction is None else self.final_lr_fraction

    @property
    def settings(self) -> ScheduleSettings:
        return ScheduleSettings(self.warmup_steps, self.final, self.decay_fraction, self.decay_shape)

    def multiplier(self, step: int, total_steps: int) -> float:
        """The multiplier of lr at `step` of a run of `total_steps`."""
        return SCHEDULES[self.schedule](step, total_steps, self.settings)


def parameter_groups(model: nn.Module, weight_decay: float, positional_lr: float | None = None) -> list[dict]:
    """Decay only the weight matrices of Linear and Conv layers; a tied output head is the token
    embedding, so it is not decayed. With `positional_lr`, the positional schemes' parameters form a
    third group (no decay) at that learning rate."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    matrices = {
        id(m.weight)
        for m in model.modules()
        if isinstance(m, (nn.Linear, nn.Conv2d)) and id(m.weight) not in embeddings
    }
    params = {id(p): p for p in model.parameters() if p.requires_grad}
    positional = set()
    if positional_lr is not None:
        positional = {id(p) for m in model.modules() if isinstance(m, PositionalScheme) for p in m.parameters()}
    decay = [p for i, p in params.items() if i in matrices]
    no_decay = [p for i, p in params.items() if i not in matrices and i not in positional]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    own = [p for i, p in params.items() if i in positional]
    return groups + [{"params": own, "weight_decay": 0.0, "lr": positional_lr}] if own else groups


def parametrized_groups(groups: list[dict], model: nn.Module, lr: float, eps: float) -> list[dict]:
    """`groups` split by the parametrization's factors on each parameter's lr, Adam ε and weight decay
    (`TransformerModel.optimizer_factors`: µP's η/m_N for hidden matrices, ...); under `sp` every factor is 1 and
    the groups are returned as they are. A model holding no suite model (a bare module) keeps its groups."""
    suite = next((m for m in model.modules() if isinstance(m, TransformerModel)), None)
    factors = suite.optimizer_factors() if suite is not None else {}
    split = []
    for group in groups:
        by_factors: dict[tuple[float, float, float], list] = {}
        for p in group["params"]:
            by_factors.setdefault(factors.get(id(p), (1.0, 1.0, 1.0)), []).append(p)
        if set(by_factors) <= {(1.0, 1.0, 1.0)}:
            split.append(group)
            continue
        for (f_lr, f_eps, f_decay), params in by_factors.items():
            split.append(group | {"params": params, "lr": group.get("lr", lr) * f_lr, "eps": eps * f_eps,
                                  "weight_decay": group["weight_decay"] * f_decay})  # fmt: skip
    return split


def adamw_kernel(fused: bool, precision: str) -> dict[str, bool]:
    """AdamW's implementation keywords (`fused`, `foreach`) under a Trainer precision.

    Fused AdamW unscales gradients inside its own step (it sets `_step_supports_amp_scaling`), so
    Lightning's mixed-precision plugin cannot unscale them before clipping and refuses to clip
    at all ("does not allow for gradient clipping because it performs unscaling of gradients
    internally"): every config clips (`gradient_clip_val: 1.0`), so a `*-mixed` run would stop at
    its first step. There the foreach implementation runs instead: the same update (equal up to
    float rounding), batched over tensors, and Lightning unscales and clips before it. The choice
    depends on the precision only, never on the clipping value, so an ablation of clipping does
    not also change the kernel. Every other precision keeps what `fused` asks for, so
    full-precision numerics are those of before.

    Args:
        fused: `OptimConfig.fused`.
        precision: the Trainer's precision (`trainer.precision`: "32-true", "bf16-mixed", ...).
    """
    if fused and str(precision).endswith("-mixed"):
        return {"fused": False, "foreach": True}
    return {"fused": fused}


def build_optimizer(model: nn.Module, cfg: OptimConfig, total_steps: int, precision: str = "32-true"):
    """AdamW over `parameter_groups` (split by the model's parametrization) and the schedule of `cfg.schedule`
    (stepped once per optimiser step).

    Args:
        model: the parameters to optimise.
        cfg: optimiser and schedule.
        total_steps: length of the schedule.
        precision: the Trainer's precision, which picks AdamW's implementation (`adamw_kernel`).
    """
    positional_lr = cfg.lr * cfg.positional_lr_scale if cfg.positional_lr_scale != 1 else None
    groups = parameter_groups(model, cfg.weight_decay, positional_lr)
    optimizer = torch.optim.AdamW(
        parametrized_groups(groups, model, cfg.lr, cfg.eps),
        lr=cfg.lr,
        betas=cfg.betas,
        eps=cfg.eps,
        **adamw_kernel(cfg.fused, precision),
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: cfg.multiplier(step, total_steps))
    return optimizer, schedule
