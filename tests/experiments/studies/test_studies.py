"""Every sweep spec stays runnable: each validates (fast), and each runs in a smoke mode — 1 seed, a
few steps, every cell — in the slow set (`make test-all`). Every study folder is self-contained: its
committed results match its specs, `cli.py report` rebuilds its report with the same numbers, and
every link in the READMEs resolves."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from experiments.analysis import decisions
from experiments.records.layout import SWEEP_INFO
from experiments.sweep import run_sweep
from experiments.sweep.same_sweep import check_same_sweep, snapshot_of
from experiments.sweep.spec import load_spec, pretrained_files, read_spec
from experiments.sweep.validate import check_spec
from tools import report, sweep

ROOT = Path(__file__).resolve().parents[3]
STUDIES = sorted(p.parent for p in (ROOT / "experiments" / "studies").glob("*/README.md"))
SPECS = sorted((ROOT / "experiments").glob("*.yaml")) + sorted((ROOT / "experiments" / "studies").glob("*/*.yaml"))
SHARED = ROOT.parent / "shared" / "data"


def needs_shared_data(spec: Path) -> bool:
    """Whether the spec's runs read ../shared/data: a value of its `fixed` (its `extends:` applied) or of its
    base configs (configs/gpt/tinyshakespeare_small.yaml)."""
    data = read_spec(spec)
    base = [data["base"]] if isinstance(data["base"], str) else data["base"]
    return any("../shared/data" in text for text in [str(data.get("fixed")), *((ROOT / b).read_text() for b in base)])


def smoke_inputs(pretrained: dict | None, tmp_path: Path) -> dict | None:
    """A spec's `pretrained:` block (a fine-tune's pre-trained checkpoint and vocabulary, files of another
    spec's run), pointed at that spec's own smoke run under `tmp_path` where its files are not on disk
    (checkpoints are not committed)."""
    if not pretrained or all((ROOT / f).exists() for f in pretrained_files(pretrained).values()):
        return pretrained
    inputs = tmp_path / "inputs"
    other = smoke_spec(Path(pretrained["spec"]), inputs)  # its run: inputs/results/<name>/<cell>/seed<k>
    out = inputs / "results" / other.stem
    if not out.exists():
        assert run_sweep(other, out, threads=1).failed == 0
    return pretrained | {"spec": str(other)}


def smoke_spec(spec: Path, tmp_path: Path) -> Path:
    """The spec with one seed, two training steps and one validation (and test) batch."""
    data = read_spec(spec)  # `extends:` resolved: the copy lives elsewhere
    data["seeds"] = data.get("seeds", [0])[:1]
    if "pretrained" in data:
        data["pretrained"] = smoke_inputs(data["pretrained"], tmp_path)
    data["fixed"] = (data.get("fixed") or {}) | {
        "trainer.max_steps": 2,
        "trainer.val_check_interval": 2,
        "trainer.limit_val_batches": 1,
        "trainer.limit_test_batches": 1,  # a tuned spec's final runs are tested (SCAN: thousands of decodes)
        "trainer.num_sanity_val_steps": 0,
    }
    if data.get("horizons"):  # two short lengths, each past a 1-step warmup and a multiple of the validation interval
        data["horizons"] = [4, 8]
    if data.get("horizons") or "trainer.max_steps" in (data.get("grid") or {}):
        del data["fixed"]["trainer.max_steps"]
        varied = any("model.optim.warmup_steps" in cell for cell in data.get("cells") or [])
        for cell in data.get("cells") or []:
            if "model.optim.warmup_steps" in cell:  # 0 stays 0: cells without warmup differ from those with
                cell["model.optim.warmup_steps"] = min(cell["model.optim.warmup_steps"], 1)
        data["fixed"] |= {} if varied else {"model.optim.warmup_steps": 1}
        if "grid" in data and "trainer.max_steps" in data["grid"]:
            data["grid"]["trainer.max_steps"] = [4, 8]
    data["checkpoint_every"] = 2
    data.pop("require_clean", None)  # a smoke run checks the spec, not the tree it runs from
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / spec.name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_specs_found():
    assert {"demo.yaml", "extrapolation.yaml", "norm_placement.yaml", "vit_positional.yaml"} <= {s.name for s in SPECS}


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_spec_validates(spec, tmp_path, capsys):
    if needs_shared_data(spec) and not SHARED.exists():
        pytest.skip(f"{SHARED} is absent")
    assert sweep.main([str(spec), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    commands = [line for line in capsys.readouterr().out.splitlines() if "cli.py fit" in line]
    data = read_spec(spec)
    assert len(commands) >= len(data.get("seeds", [0]))
    assert not (tmp_path / "out" / "results.csv").exists()  # a dry run writes nothing


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_spec_smoke_run(spec, tmp_path):
    if needs_shared_data(spec) and not SHARED.exists():
        pytest.skip(f"{SHARED} is absent")
    out = tmp_path / "out"
    assert sweep.main([str(smoke_spec(spec, tmp_path)), "--out", str(out), "--threads", "1"]) == 0
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert rows and all(r["status"] in ("done", "diverged") for r in rows)
    assert (out / "report.md").exists()


def test_every_study_is_a_folder():
    assert {s.name for s in STUDIES} >= {"extrapolation", "norm_placement", "scan_length", "vit_positional"}
    for study in STUDIES:
        specs = sorted(study.glob("*.yaml"))
        assert specs, f"{study} has no spec"
        assert (study / "__init__.py").is_file(), f"{study} is not importable (its scripts run with python -m)"


@pytest.mark.parametrize("spec", [s for s in SPECS if "studies" in s.parts], ids=lambda p: p.stem)
def test_committed_results_match_their_spec(spec):
    """A study's committed sweep folder was made by this spec: resuming it is accepted (its cells resolve
    to the runs' configs, however the spec spells them now: shared base configs, values no longer restated),
    and its cells, seeds, baseline and report options are the spec's. `require_clean` may have been set
    since: it decides which trees a sweep starts from, not any run's settings (the runs' own commits are
    checked in test_committed_provenance)."""
    folder = spec.parent / "results" / spec.stem
    if not (folder / SWEEP_INFO).exists():
        pytest.skip(f"{spec.stem} has no committed results")
    if needs_shared_data(spec) and not SHARED.exists():
        pytest.skip(f"{SHARED} is absent")
    loaded = load_spec(spec)
    old, new = json.loads((folder / SWEEP_INFO).read_text()), loaded.snapshot()
    assert old["spec"] == str(spec.relative_to(ROOT))
    check_same_sweep(folder, loaded, check_spec(loaded))
    spelt = ("spec", "require_clean", "base", "fixed")  # how the runs' settings are written: compared resolved
    old = snapshot_of(old)  # the resolved configs are checked above
    assert {k: v for k, v in old.items() if k not in spelt} == {k: v for k, v in new.items() if k not in spelt}


REPORTED = sorted(p.parent for p in (ROOT / "experiments" / "studies").glob("*/results/*/report.md"))
QUICK_REPORT = ROOT / "experiments/studies/vit_positional/results/vit_positional"


@pytest.mark.parametrize(
    "committed",
    [pytest.param(f, marks=() if f == QUICK_REPORT else pytest.mark.slow, id=f.name) for f in REPORTED],
)
def test_report_rebuilds_a_committed_study(committed, tmp_path):
    """`cli.py report` on a committed study folder gives back its committed report, number for number (one
    study in the quick set; every study, a ladder's report taking minutes of bootstrap fits, in the slow set)."""
    copy = tmp_path / committed.name
    shutil.copytree(committed, copy)
    (copy / "report.md").unlink()
    assert report.main([str(copy)]) == 0
    assert (copy / "report.md").read_text() == (committed / "report.md").read_text()
    assert (copy / "report.csv").read_text() == (committed / "report.csv").read_text()


MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_readme_links_resolve():
    readmes = [ROOT / "README.md", *sorted((ROOT / "experiments").rglob("README.md"))]
    broken = []
    for readme in readmes:
        for target in MARKDOWN_LINK.findall(readme.read_text()):
            path = target.split("#", 1)[0]
            if path and not re.match(r"^[a-z]+:", target) and not (readme.parent / path).exists():
                broken.append(f"{readme.relative_to(ROOT)}: {target}")
    assert not broken, "broken links:\n" + "\n".join(broken)


# experiments/README.md, "Verdicts": the one vocabulary every reproduction states its verdicts in, with the decision
# library's guarded inconclusives ("inconclusive by the bracketing rule")
VERDICTS = {"reproduced", "partly reproduced", "not reproduced", "inconclusive"} | {
    f"inconclusive by the {rule} rule" for rule in decisions.PREFIX
}


@pytest.mark.parametrize("study", STUDIES, ids=lambda p: p.name)
def test_readme_states_a_verdict_and_what_would_change_it(study):
    """A study's README opens with its verdict(s) in the vocabulary and says what would change them; every
    later `Verdict:` paragraph (a section's own claim) bolds its verdicts from the vocabulary too."""
    text = (study / "README.md").read_text()
    verdicts = re.findall(r"^Verdict: (.*?)(?:\n\n|\Z)", text, re.MULTILINE | re.DOTALL)
    assert verdicts and text.lstrip().split("\n\n")[1].startswith("Verdict: "), (
        f"{study.name}/README.md does not open with a 'Verdict:' paragraph under its title"
    )
    for verdict in verdicts:
        labels = [" ".join(label.lower().split()) for label in re.findall(r"\*\*([^*]+)\*\*", verdict)]
        assert labels, f"{study.name}: a verdict paragraph bolds no verdict: {verdict[:80]!r}"
        unknown = sorted(set(labels) - VERDICTS)
        assert not unknown, f"{study.name}: verdict(s) {unknown} not in {sorted(VERDICTS)}"
    assert "What would change this verdict" in text, f"{study.name}: no 'What would change this verdict' line"
