"""Launchers: what runs the runs a sweep still has to run (`cli.py sweep --launcher NAME`), a registry of
small objects behind one protocol (`base.Launcher`) that carry their own facts.

- `pool` (default): this process, `--jobs` runs at a time (`pool`).
- `local`: submitit's LocalExecutor: each run a job on this machine; the sweep waits for them (`local`).
- `slurm`: a SLURM job array; the sweep submits and returns, and the same command run again records (`slurm`).
"""

from __future__ import annotations

from experiments.sweep.launchers.base import Launch, Launched, Launcher
from experiments.sweep.launchers.local import Local
from experiments.sweep.launchers.pool import Pool
from experiments.sweep.launchers.slurm import Slurm

LAUNCHERS: dict[str, Launcher] = {launcher.name: launcher for launcher in (Pool(), Local(), Slurm())}

__all__ = ["LAUNCHERS", "Launch", "Launched", "Launcher"]
