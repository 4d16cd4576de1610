"""The sweep's table inside TensorBoard, at `DIR/_summary/`, so `tensorboard --logdir DIR` shows the
runs' curves and the cells' comparison side by side: a text summary (the report's tables) and one
HParams session per cell (its axis values as hparams, its mean metrics as metrics)."""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from experiments.sweep.spec import SUMMARY_DIR, format_value


def _hparam(value: Any) -> int | float | str | bool:
    return value if isinstance(value, (int, float, str, bool)) else format_value(value)


def write_summary(
    out_dir: Path,
    markdown: str,
    axis_values: Mapping[str, Mapping[str, Any]],
    metrics: Mapping[str, Mapping[str, float]],
) -> Path:
    """Rewrites `DIR/_summary/` (it holds nothing but this summary).

    Args:
        out_dir: the sweep's folder.
        markdown: the report's tables.
        axis_values: cell -> {axis key: value}.
        metrics: cell -> {name: mean over finished runs}; nan values are left out.

    Returns:
        The summary folder.
    """
    from torch.utils.tensorboard import SummaryWriter  # imports torch: only when a report is written

    root = out_dir / SUMMARY_DIR
    shutil.rmtree(root, ignore_errors=True)  # a second report would otherwise add duplicate sessions
    writer = SummaryWriter(log_dir=str(root))
    writer.add_text("sweep/report", markdown)
    domains: dict[str, set] = {}
    for values in axis_values.values():
        for key, value in values.items():
            domains.setdefault(key, set()).add(_hparam(value))
    # a discrete domain lets the HParams tab filter string axes by value
    discrete = {k: sorted(v, key=str) for k, v in domains.items() if all(isinstance(x, str) for x in v)}
    for cell, values in axis_values.items():
        hparams = {"cell": cell} | {key: _hparam(value) for key, value in values.items()}
        finite = {f"sweep/{name}": value for name, value in metrics.get(cell, {}).items() if math.isfinite(value)}
        writer.add_hparams(hparams, finite, hparam_domain_discrete=discrete or None, run_name=cell)
    writer.close()
    return root
