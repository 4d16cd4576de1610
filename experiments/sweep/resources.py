"""How many processes one run starts, and the threads each of them gets.

A run with `trainer.devices: 2` (DDP on CPU or on 2 GPUs) starts 2 processes, each with
`OMP_NUM_THREADS` threads; `--jobs` counts runs, so the sweep gives each process
`cores // (jobs × processes per run)` threads (at least 1).

`trainer.devices` as Lightning reads it: an int (or its digits), a list of device indices or a
"0,1" string of indices (their count), or "auto"/-1 ("every device": 1 on CPU, as Lightning's
`CPUAccelerator`; the GPUs this machine has with a GPU-capable accelerator, at least 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GPU_ACCELERATORS = ("gpu", "cuda")
ALL_DEVICES = ("auto", "-1", -1)


@dataclass(frozen=True)
class RunShape:
    """A run's processes, from its resolved `trainer.*` settings.

    Args:
        devices: processes per node; None when `devices` is "auto"/-1 (it depends on the machine).
        nodes: `trainer.num_nodes`.
        accelerator: `trainer.accelerator` as set ("auto", "cpu", "gpu", ...).
    """

    devices: int | None
    nodes: int = 1
    accelerator: str = "auto"

    def devices_here(self) -> int:
        """Processes per node on this machine ("auto"/-1 resolved as Lightning would here)."""
        if self.devices is not None:
            return self.devices
        if self.accelerator == "cpu":
            return 1
        import torch  # only here: this module is imported where torch is not needed

        return max(1, torch.cuda.device_count()) if self.accelerator in (*GPU_ACCELERATORS, "auto") else 1

    def processes(self) -> int:
        """Processes of one run: devices per node × nodes."""
        return self.devices_here() * self.nodes


def count_devices(devices: Any) -> int | None:
    """The number of devices a `trainer.devices` value asks for; None for "auto"/-1 (every device)."""
    if devices in ALL_DEVICES:
        return None
    if isinstance(devices, (list, tuple)):
        return len(devices)
    if isinstance(devices, str):
        text = devices.strip()
        if text.isdigit():
            return int(text)
        return len([part for part in text.split(",") if part.strip()])  # "0,1": device indices
    if isinstance(devices, int) and devices > 0:
        return devices
    raise ValueError(f"trainer.devices: cannot tell how many devices {devices!r} is")


def run_shape(trainer: dict[str, Any]) -> RunShape:
    """The shape of a run from its resolved trainer settings.

    Args:
        trainer: `devices`, `num_nodes` and `accelerator` as parsed (missing ones take Lightning's defaults).
    """
    accelerator = trainer.get("accelerator", "auto")
    return RunShape(
        devices=count_devices(trainer.get("devices", "auto")),
        nodes=int(trainer.get("num_nodes") or 1),
        accelerator=accelerator if isinstance(accelerator, str) else "custom",  # an Accelerator instance
    )


def auto_jobs(cores: int, processes: int, runs: int) -> int:
    """`--jobs auto`: as many runs at a time as the cores hold one thread per process, but never more
    than the runs left to do (whose processes then share the spare cores as threads).

    The benchmark measured the rule on 2 cores (`experiments/bench/sweeps.py`): two single-thread runs
    of a small model gave 1.16x the throughput of one two-thread run on a quiet machine (5.5x when other
    processes held the cores), since a small model's ops are too short to keep two threads busy.

    Args:
        cores: cores this sweep may use.
        processes: processes of the largest run (DDP cells start several).
        runs: runs still to start or resume.
    """
    return max(1, min(cores // max(1, processes), runs))


def threads_per_process(cores: int, jobs: int, processes: int) -> int:
    """Threads for each process of a run when `jobs` runs of `processes` processes share `cores`.

    Args:
        cores: cores this sweep may use.
        jobs: runs at a time (`--jobs`).
        processes: processes of one run on this machine.
    """
    return max(1, cores // (jobs * processes))
