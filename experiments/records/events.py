"""Scalars of a run, read from its TensorBoard event files with TensorBoard's own reader.

A resumed run writes a second event file into the same folder and logs again the steps between
its checkpoint and the interruption; files are read oldest first and a later value of a
(tag, step) replaces the earlier one, so nothing is counted twice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.plugins.hparams import metadata as hparams_metadata

EVENT_GLOB = "events.out.tfevents.*"


@dataclass(frozen=True)
class RunScalars:
    """A run's scalar curves and how long it trained.

    Args:
        curves: tag -> {step: value}, one value per step (the latest file's).
        wall_time_s: seconds from first to last event of each process, summed over resumed attempts
            (training and validation; process start-up is not in the event files).
        wall_times: tag -> {step: when that value was logged (Unix time)}.
    """

    curves: dict[str, dict[int, float]]
    wall_time_s: float
    wall_times: dict[str, dict[int, float]] = field(default_factory=dict)

    def last(self, tag: str, finite: bool = False) -> float | None:
        """The value at the tag's last step (the last finite one with `finite`), None if there is none."""
        points = self.curves.get(tag, {})
        for step in sorted(points, reverse=True):
            if not finite or math.isfinite(points[step]):
                return points[step]
        return None


def _event_files(run_dir: Path) -> list[Path]:
    def written(path: Path) -> tuple[int, float, str]:
        # events.out.tfevents.<unix time>.<host>.<pid>.<n>: the creation time orders the attempts
        stamp = path.name.split(".")[3]
        return (int(stamp) if stamp.isdigit() else 0, path.stat().st_mtime, path.name)

    return sorted(run_dir.glob(EVENT_GLOB), key=written)


def read_scalars(run_dir: Path) -> RunScalars:
    """Reads every scalar of the run in `run_dir` (nothing if it has no event file yet).

    Args:
        run_dir: the folder Lightning's TensorBoardLogger wrote to.
    """
    curves: dict[str, dict[int, float]] = {}
    stamps: dict[str, dict[int, float]] = {}
    wall = 0.0
    for path in _event_files(run_dir):
        acc = event_accumulator.EventAccumulator(str(path), size_guidance={event_accumulator.SCALARS: 0})
        acc.Reload()
        times = []
        for tag in acc.Tags()["scalars"]:
            for event in acc.Scalars(tag):
                curves.setdefault(tag, {})[event.step] = event.value
                stamps.setdefault(tag, {})[event.step] = event.wall_time
                times.append(event.wall_time)
        if times:
            wall += max(times) - min(times)
    return RunScalars(curves, wall, stamps)


def joined(before: RunScalars, after: RunScalars, start: int) -> RunScalars:
    """A run that started from another's checkpoint at step `start` (a `horizons:` sweep's decay branch), as one
    run: the other's values before `start`, then its own (the events of the steps it trained).

    Args:
        before: the run it started from (the stable run).
        after: the run itself.
        start: the step it started from.
    """
    tags = dict.fromkeys([*before.curves, *after.curves])
    curves = {
        t: {s: v for s, v in before.curves.get(t, {}).items() if s < start} | after.curves.get(t, {}) for t in tags
    }
    stamps = {t: {s: v for s, v in before.wall_times.get(t, {}).items() if s < start} | after.wall_times.get(t, {})
              for t in tags}  # fmt: skip
    return RunScalars({t: c for t, c in curves.items() if c}, after.wall_time_s, stamps)


def read_hparams(run_dir: Path) -> dict[str, bool | float | str]:
    """The hparams of the run's own HParams session (what `log_hyperparams` wrote; the latest
    attempt's if resumed), {} if it logged none.

    Args:
        run_dir: the folder Lightning's TensorBoardLogger wrote to.
    """
    hparams: dict[str, bool | float | str] = {}
    for path in _event_files(run_dir):
        acc = event_accumulator.EventAccumulator(str(path))
        acc.Reload()
        try:
            content = acc.PluginTagToContent(hparams_metadata.PLUGIN_NAME).get(hparams_metadata.SESSION_START_INFO_TAG)
        except KeyError:  # a file with no HParams at all (`cli.py test` of the run's checkpoint logs beside it)
            continue
        if content is not None:
            start = hparams_metadata.parse_session_start_info_plugin_data(content)
            hparams = {key: getattr(value, value.WhichOneof("kind")) for key, value in start.hparams.items()}
    return hparams
