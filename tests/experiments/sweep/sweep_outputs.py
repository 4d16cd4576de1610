"""What a sweep wrote, read back for the sweep tests (`test_sweep_runs`): its ledger (results.csv) by run,
and a run folder's files in a form two runs of one seed can be compared in."""

from __future__ import annotations

import csv
import re
from pathlib import Path


def read_rows(out: Path) -> list[dict[str, str]]:
    with (out / "results.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def by_run(rows: list[dict[str, str]]) -> dict[tuple[str, str], dict[str, str]]:
    keyed = {(r["cell"], r["seed"]): r for r in rows}
    assert len(keyed) == len(rows), "duplicate rows in results.csv"
    return keyed


def normalised(text: str, out: Path) -> str:
    """A run's text without what differs between two identical runs: times and the sweep folder."""
    text = re.sub(r"elapsed \d+m\d+s", "elapsed T", text.replace(str(out), "DIR"))
    text = re.sub(r'"step_time_ms": [\d.e+-]+', '"step_time_ms": T', text)
    return re.sub(r"(?m)^=== [\d: -]+ ", "=== T ", text)


def run_folder(run_dir: Path, out: Path) -> dict[str, object]:
    """Each file of a run folder: text normalised, a checkpoint's tensors as bytes, else the size (event
    files, named by kind: their names hold host and time). git.diff is left out: it is the tree's patch
    at that moment, which other edits may change."""
    import torch

    found: dict[str, object] = {}
    for path in sorted(run_dir.rglob("*")):
        name = re.sub(r"events\.out\.tfevents\..*", "events", str(path.relative_to(run_dir)))
        if not path.is_file() or path.name == "git.diff":
            continue
        if path.suffix in (".yaml", ".json", ".log"):
            found[name] = normalised(path.read_text(), out)
        elif path.suffix == ".ckpt":
            checkpoint = torch.load(path, map_location="cpu", weights_only=False)
            tensors = {
                **checkpoint["state_dict"],
                **{
                    f"optimizer.{i}.{k}": v
                    for i, state in checkpoint["optimizer_states"][0]["state"].items()
                    for k, v in state.items()
                },
            }
            found[name] = {k: v.numpy().tobytes() for k, v in tensors.items()}
        else:
            found[name] = path.stat().st_size
    return found
