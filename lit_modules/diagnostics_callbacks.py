"""Training diagnostics in TensorBoard (`Diagnostics`) and the loss-spike count of every run (`LossSpikes`).

`Diagnostics` probes one training step in `every_n_steps` (`models.probes.Probe`): per attention module
its heads' entropy, mean attention distance and largest logit (scalars, and a module × head heatmap image), the
residual stream's RMS after each block, the output logits' mean, max and log Z, and each block's gradient norm.
The probes change nothing the step computes, so a run trains the same with them on or off
(`--diagnostics.every_n_steps 0`).

Under DDP every process probes its own batch; the numbers are gathered once (one collective, on every process)
and rank 0 writes them. Lightning has no callback for this: its `LearningRateMonitor`/`DeviceStatsMonitor` log
other things, and the attention probabilities exist only inside the model (hence the probe).
"""

from __future__ import annotations

import io
import math
from collections import deque
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor

from contract.run_record import ProbeHeadlines
from models.probes import Probe

from .callbacks import mark_run

TAG = "diagnostics"
MAX_SPIKE_STEPS = 100  # run.json lists the first spikes' steps; the count counts them all


def _model(pl_module: pl.LightningModule) -> torch.nn.Module:
    """The task's model itself (`TaskModule.base_model`: not a compiled wrapper)."""
    return getattr(pl_module, "base_model", pl_module)


def block_grad_norms(model: torch.nn.Module, blocks: list[tuple[str, torch.nn.Module]]) -> dict[str, Tensor]:
    """The gradient's L2 norm over each block's parameters, and over the rest (`other`: embeddings, head)."""
    norms, seen = {}, set()
    for name, block in blocks:
        grads = [p.grad.detach().float() for p in block.parameters() if p.grad is not None]
        seen |= {id(p) for p in block.parameters()}
        norms[name] = _norm(grads)
    norms["other"] = _norm(
        [p.grad.detach().float() for p in model.parameters() if p.grad is not None and id(p) not in seen]
    )
    return norms


def _norm(grads: list[Tensor]) -> Tensor:
    """The L2 norm over `grads`; sharded gradients (FSDP2's DTensors, `lit_modules.sharding`) are summed over
    their shards (a collective: every process calls it, with the same blocks)."""
    squares = [g.square().sum() for g in grads]
    squares = [s.full_tensor() if hasattr(s, "full_tensor") else s for s in squares]
    return torch.stack(squares).sum().sqrt() if squares else torch.tensor(0.0)


def heatmap(values: Tensor, rows: list[str], title: str) -> Any:
    """A rows × heads heatmap with its colour scale, as an (H, W, 4) uint8 image. A fixed layout (no
    tight_layout, no per-cell text): matplotlib's layout passes cost more than the whole probe."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # no pyplot: no global figure state in training
    from matplotlib.figure import Figure

    n_rows, heads = values.shape
    label = 0.07 * max(map(len, rows))  # inches of the longest row name
    width, height = label + 0.5 * heads + 1.2, 0.9 + 0.3 * n_rows
    fig = Figure(figsize=(width, height), dpi=100)
    canvas = FigureCanvasAgg(fig)
    left, bottom, top = (label + 0.15) / width, 0.35 / height, 0.3 / height
    ax = fig.add_axes((left, bottom, 1 - left - 1.0 / width, 1 - bottom - top))
    image = ax.imshow(values.numpy(), aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_xticks(range(heads), [str(h) for h in range(heads)], fontsize=7)
    ax.set_yticks(range(n_rows), rows, fontsize=7)
    ax.set_title(f"{title} (x: head)", fontsize=8)
    scale = fig.colorbar(image, cax=fig.add_axes((1 - 0.8 / width, bottom, 0.15 / width, 1 - bottom - top)))
    scale.ax.tick_params(labelsize=7)
    scale.ax.yaxis.get_major_formatter().set_useOffset(False)  # an offset ("1e-5+3.205") would overlap the title
    buffer = io.BytesIO()
    canvas.print_raw(buffer)
    width_px, height_px = canvas.get_width_height()
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8).reshape(height_px, width_px, 4).numpy()


def residual_growth(rms: dict[str, float]) -> float | None:
    """ln(RMS after the last block / RMS after the first) of the model's last stack (the decoder of an
    encoder-decoder): how much the residual stream grows with depth (Kim et al. 2025's Peri-LN question)."""
    if not rms:
        return None
    names = list(rms)
    stack = names[-1].rpartition("block")[0]  # `decoder.` of `decoder.block5`; `` of `block5`
    blocks = [n for n in names if n.rpartition("block")[0] == stack]
    first, last = rms[blocks[0]], rms[blocks[-1]]
    return math.log(last / first) if first > 0 and last > 0 else None


class Diagnostics(pl.Callback):
    """Probes a training step every `every_n_steps` and logs what the model does inside, under `diagnostics/`.

    Args:
        every_n_steps: the period in optimizer steps (step 0 included); 0 turns the diagnostics off.
        heatmap_every_n_steps: the heatmap images' period: drawn on the first probed step and then on the first
            probed step at least this many steps after the last drawing (drawing costs more than the probe); 0: none.
        rows: sequences of each probed batch (per process) whose attention probabilities are recomputed.
    """

    def __init__(self, every_n_steps: int = 100, heatmap_every_n_steps: int = 500, rows: int = 2):
        if every_n_steps < 0 or rows < 1:
            raise ValueError(f"diagnostics: every_n_steps={every_n_steps} must be ≥ 0 (0: off) and rows={rows} ≥ 1")
        if heatmap_every_n_steps < 0:
            raise ValueError(f"diagnostics: heatmap_every_n_steps={heatmap_every_n_steps} must be ≥ 0 (0: no heatmaps)")
        self.every_n_steps, self.heatmap_every_n_steps, self.rows = every_n_steps, heatmap_every_n_steps, rows
        self._drawn_at: int | None = None  # the step of the last heatmaps
        self._probe: Probe | None = None
        self._grad_norms: dict[str, Tensor] | None = None
        self._step = 0

    def _due(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> bool:
        # a compiled model runs its graph, not the probes' hooks
        return (
            self.every_n_steps > 0
            and trainer.global_step % self.every_n_steps == 0
            and not getattr(pl_module, "compile", False)
        )

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._probe is None and self._due(trainer, pl_module):  # the first micro-batch of an accumulated step
            self._probe = Probe(_model(pl_module), self.rows).__enter__()
            self._grad_norms, self._step = None, trainer.global_step

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if self._probe is not None:  # before clipping: the gradient the backward made
            self._grad_norms = block_grad_norms(_model(pl_module), self._probe.blocks())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._probe is None or self._grad_norms is None:  # off, or an accumulating micro-batch
            return
        probe, self._probe = self._probe, None
        probe.__exit__(None, None, None)
        means, maxima = self._gather(trainer, probe)
        if trainer.is_global_zero:  # one writer; no collective below this line
            self._log(trainer, probe, means, maxima)

    def on_exception(self, trainer, pl_module, exception) -> None:
        if self._probe is not None:
            self._probe.__exit__(None, None, None)
            self._probe = None

    def _gather(self, trainer: pl.Trainer, probe: Probe) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """Every process's numbers, averaged (maxima: their maximum), by one all-gather on every process."""
        means = {f"attn_entropy/{n}": s.entropy for n, s in probe.attention.items()}
        means |= {f"attn_distance/{n}": s.distance for n, s in probe.attention.items()}
        means |= {f"residual_rms/{n}": v.reshape(1) for n, v in probe.residual_rms.items()}
        means |= {f"grad_norm/{n}": v.reshape(1) for n, v in (self._grad_norms or {}).items()}
        means |= {k: v.reshape(1) for k, v in probe.output.items() if k != "logit_max"}
        maxima = {f"attn_max_logit/{n}": s.max_logit for n, s in probe.attention.items()}
        maxima |= {"logit_max": probe.output["logit_max"].reshape(1)} if "logit_max" in probe.output else {}
        parts = {**means, **maxima}
        flat = torch.cat([v.detach().float().reshape(-1).cpu() for v in parts.values()])
        if trainer.world_size > 1:
            gathered = trainer.strategy.all_gather(flat.to(trainer.strategy.root_device)).cpu()  # (world, n)
            mean, top = gathered.mean(0), gathered.amax(0)
        else:
            mean = top = flat
        out, start = {}, 0
        for key, value in parts.items():
            source = top if key in maxima else mean
            out[key] = source[start : start + value.numel()]
            start += value.numel()
        return {k: out[k] for k in means}, {k: out[k] for k in maxima}

    def _log(self, trainer: pl.Trainer, probe: Probe, means: dict[str, Tensor], maxima: dict[str, Tensor]) -> None:
        scalars = {}
        for key, value in {**means, **maxima}.items():
            per_head = key.startswith("attn_")
            reduced = value.amax() if key in maxima else value.nanmean() if per_head else value[0]
            if math.isfinite(float(reduced)):  # a cross-attention's distance is nan: not logged
                scalars[f"{TAG}/{key}"] = float(reduced)
        heads = [v for k, v in maxima.items() if k.startswith("attn_max_logit/")]
        if heads:  # the headline: Wortsman et al.'s attention-logit growth, over every layer
            scalars[f"{TAG}/attn_max_logit"] = float(torch.cat(heads).amax())
        growth = residual_growth({k.removeprefix("residual_rms/"): float(v[0]) for k, v in means.items()
                                  if k.startswith("residual_rms/")})  # fmt: skip
        if growth is not None:
            scalars[f"{TAG}/residual_growth"] = growth
        for logger in trainer.loggers:
            logger.log_metrics(scalars, step=self._step)
        # the last probe's headlines in run.json, so the ledger has them as columns (`RUN_DIAGNOSTICS`)
        headline = {k.removeprefix(f"{TAG}/"): v for k, v in scalars.items() if k.count("/") == 1}
        mark_run(trainer, diagnostics=ProbeHeadlines(step=self._step, **headline))
        if self.heatmap_every_n_steps and (
            self._drawn_at is None or self._step - self._drawn_at >= self.heatmap_every_n_steps
        ):
            self._log_heatmaps(trainer, probe, means)
            self._drawn_at = self._step

    def _log_heatmaps(self, trainer: pl.Trainer, probe: Probe, means: dict[str, Tensor]) -> None:
        names = list(probe.attention)
        self_attention = [n for n in names if torch.isfinite(means[f"attn_distance/{n}"]).all()]
        pictures = {
            "attn_entropy": (names, "attention entropy (nats)"),
            "attn_distance": (self_attention, "mean attention distance"),
        }
        for logger in trainer.loggers:
            add_image = getattr(getattr(logger, "experiment", None), "add_image", None)
            if add_image is None:  # TensorBoard draws images; other loggers get the scalars
                continue
            for key, (rows, title) in pictures.items():
                if rows:
                    values = torch.stack([means[f"{key}/{n}"] for n in rows])
                    title = f"{title}, step {self._step}"
                    add_image(f"{TAG}/{key}", heatmap(values, rows, title), self._step, dataformats="HWC")


class LossSpikes(pl.Callback):
    """Counts loss spikes into `run.json` (`loss_spikes`, and `loss_spike_steps`: the step each began), the
    ledger and the report, and logs the running count as `diagnostics/loss_spikes`.

    The rule: a step's training loss (`train/loss`, the global batch's) is a spike when it exceeds the mean of the
    previous `window` steps' losses by more than `threshold` of their standard deviations; spike steps do not
    enter the window, and consecutive spike steps are one spike. Counting starts once the window is full.
    Every process computes the same count from the same global loss: no collective.

    Args:
        window: trailing steps whose losses make the reference.
        threshold: the z-score above which a loss is a spike.
    """

    def __init__(self, window: int = 50, threshold: float = 6.0):
        if window < 2 or threshold <= 0:
            raise ValueError(f"loss_spikes: window={window} must be ≥ 2 and threshold={threshold} > 0")
        self.window, self.threshold = window, threshold
        self.losses: deque[float] = deque(maxlen=window)
        self.steps: list[int] = []
        self.count = 0
        self._in_spike = False
        self._step = 0

    def observe(self, step: int, loss: float) -> bool:
        """Takes one step's loss; True when it begins a spike."""
        if not math.isfinite(loss):  # divergence is DivergenceGuard's to record
            return False
        if len(self.losses) == self.window:
            mean = sum(self.losses) / self.window
            std = math.sqrt(sum((x - mean) ** 2 for x in self.losses) / (self.window - 1))
            if loss > mean + self.threshold * std:
                began = not self._in_spike
                self._in_spike = True
                if began:
                    self.count += 1
                    if len(self.steps) < MAX_SPIKE_STEPS:
                        self.steps.append(step)
                return began
        self._in_spike = False
        self.losses.append(loss)
        return False

    def on_fit_start(self, trainer, pl_module) -> None:
        self._record(trainer)  # a resumed run's count, restored from its checkpoint

    def on_train_end(self, trainer, pl_module) -> None:  # whatever order the callbacks' on_fit_start ran in
        self._record(trainer)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._step = trainer.global_step  # the step the batch's loss belongs to (counted up after the update)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = trainer.callback_metrics.get("train/loss")  # logged with sync_dist: the same on every process
        if loss is None:
            loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if self.observe(self._step, float(loss)):
            self._record(trainer)
            for logger in trainer.loggers:
                logger.log_metrics({f"{TAG}/loss_spikes": float(self.count)}, step=self._step)

    def _record(self, trainer: pl.Trainer) -> None:
        mark_run(trainer, loss_spikes=self.count, loss_spike_steps=tuple(self.steps))

    def state_dict(self) -> dict[str, Any]:  # a resumed run goes on counting where it stopped
        return {"losses": list(self.losses), "steps": self.steps, "count": self.count, "in_spike": self._in_spike}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.losses = deque(state["losses"], maxlen=self.window)
        self.steps, self.count, self._in_spike = list(state["steps"]), int(state["count"]), bool(state["in_spike"])
