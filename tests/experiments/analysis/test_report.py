"""`cli.py report` on a synthetic ledger: its statistics against scipy, computed here independently."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import yaml
from scipy import stats

from experiments.analysis.stats import paired_difference
from experiments.records.ledger import Ledger
from experiments.sweep.spec import SpecError, load_spec
from tools import report

SEEDS = [0, 1, 2, 3, 4]
RNG = np.random.default_rng(0)
# cell -> seed -> (status, val/loss, val/acc); "rms" has a diverged and a failed run, "one" a single done run
LOSS = {"ln": 2.0 + 0.05 * RNG.standard_normal(5), "rms": 1.9 + 0.05 * RNG.standard_normal(5), "one": [2.5] * 5}
ACC = {"ln": 0.60 + 0.02 * RNG.standard_normal(5), "rms": 0.62 + 0.02 * RNG.standard_normal(5), "one": [0.3] * 5}
STATUS = {"ln": ["done"] * 5, "rms": ["done", "done", "diverged", "done", "failed"], "one": ["done"] + ["failed"] * 4}
PARAMS = {"ln": 1000, "rms": 1000, "one": 1200}  # 20% more: the report must warn


@pytest.fixture
def sweep_dir(tmp_path):
    columns = [
        "cell",
        "seed",
        "status",
        "model.arch.norm",
        "steps",
        "params",
        "flops_per_token",
        "val/acc",
        "val/loss",
        "error",
    ]
    with (tmp_path / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for cell in LOSS:
            for i, seed in enumerate(SEEDS):
                done = STATUS[cell][i] == "done"
                writer.writerow(
                    {"cell": cell, "seed": seed, "status": STATUS[cell][i], "model.arch.norm": cell, "steps": 10,
                     "params": PARAMS[cell], "flops_per_token": 2 * PARAMS[cell],
                     "val/loss": repr(float(LOSS[cell][i])) if done else "nan",
                     "val/acc": repr(float(ACC[cell][i])) if done else "",
                     "error": "" if STATUS[cell][i] != "failed" else "RuntimeError: boom"}
                )  # fmt: skip
    info = {"cells": [{"name": c, "overrides": {"model.arch.norm": c}} for c in LOSS], "baseline": "ln"}
    (tmp_path / "sweep.json").write_text(json.dumps(info | {"axes": ["model.arch.norm"], "seeds": SEEDS}))
    return tmp_path


def done_values(cell: str, values) -> dict[int, float]:
    return {s: float(values[cell][i]) for i, s in enumerate(SEEDS) if STATUS[cell][i] == "done"}


def test_statistics_match_scipy(sweep_dir):
    assert report.main([str(sweep_dir)]) == 0
    with (sweep_dir / "report.csv").open(newline="") as f:
        rows = {(r["metric"], r["cell"]): r for r in csv.DictReader(f)}
    for metric, values in (("val/loss", LOSS), ("val/acc", ACC)):
        base = done_values("ln", values)
        for cell in ("ln", "rms"):
            x = done_values(cell, values)
            v = np.array(list(x.values()))
            row = rows[(metric, cell)]
            assert int(row["n"]) == len(v)
            assert float(row["mean"]) == pytest.approx(v.mean(), rel=1e-12)
            assert float(row["std"]) == pytest.approx(v.std(ddof=1), rel=1e-12)
            low, high = stats.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=stats.sem(v))
            assert (float(row["ci_low"]), float(row["ci_high"])) == pytest.approx((low, high), rel=1e-12)
            if cell != "ln":
                common = sorted(set(x) & set(base))
                a, b = np.array([x[s] for s in common]), np.array([base[s] for s in common])
                assert int(row["n_pairs"]) == len(common) == 3
                assert float(row["diff_vs_baseline"]) == pytest.approx((a - b).mean(), rel=1e-12)
                assert float(row["p_value"]) == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-9)
        one = rows[(metric, "one")]
        assert one["n"] == "1" and one["std"] == one["ci_low"] == one["p_value"] == ""  # n < 2: n/a
    # ranks follow val/loss (lower is better); val/acc's best is its highest mean
    ranks = {cell: int(rows[("val/loss", cell)]["rank"]) for cell in LOSS}
    assert sorted(ranks, key=ranks.get) == sorted(LOSS, key=lambda c: np.mean(list(done_values(c, LOSS).values())))
    best_acc = max(("ln", "rms", "one"), key=lambda c: np.mean(list(done_values(c, ACC).values())))
    assert [c for c in LOSS if rows[("val/acc", c)]["best"] == "True"] == [best_acc]
    assert rows[("val/loss", "rms")]["diverged"] == "1" and rows[("val/loss", "rms")]["failed"] == "1"


def test_markdown_counts_outcomes_and_warns(sweep_dir):
    report.main([str(sweep_dir)])
    text = (sweep_dir / "report.md").read_text()
    assert "3/5, 1 diverged, 1 failed" in text and "1/5, 4 failed" in text
    assert "ttest_rel" in text and "Warning" in text and "20.0%" in text
    assert "val/acc (higher is better)" in text and "val/loss (lower is better) — main metric" in text
    main_table = text.split("### val/loss (lower")[1].split("###")[0]
    assert main_table.index("`rms`") < main_table.index("`ln`") < main_table.index("`one`")
    assert list((sweep_dir / "_summary").rglob("events.out.tfevents.*"))


def test_paired_interval_power_and_equivalence_match_scipy():
    """The paired difference's CI, the smallest detectable difference and TOST, each computed here
    independently with scipy."""
    rng = np.random.default_rng(1)
    base = {s: 2.0 + 0.05 * rng.standard_normal() for s in range(6)}
    cell = {s: v + 0.004 + 0.006 * rng.standard_normal() for s, v in base.items()}
    c = paired_difference(cell, base, margin=0.02)
    d = np.array([cell[s] - base[s] for s in range(6)])
    ci = stats.ttest_rel(list(cell.values()), list(base.values())).confidence_interval(0.95)
    assert (c.ci_low, c.ci_high) == pytest.approx((ci.low, ci.high), rel=1e-9)
    tost = max(stats.ttest_1samp(d, -0.02, alternative="greater").pvalue,
               stats.ttest_1samp(d, 0.02, alternative="less").pvalue)  # fmt: skip
    assert c.equivalence_p == pytest.approx(tost, rel=1e-9) and c.equivalent == (tost < 0.05)
    # power of the paired t-test at the MDE, by the noncentral t: about 80%
    se = d.std(ddof=1) / np.sqrt(6)
    crit = stats.t.ppf(0.975, 5)
    power = 1 - stats.nct.cdf(crit, 5, c.mde / se) + stats.nct.cdf(-crit, 5, c.mde / se)
    assert 0.75 < power < 0.85
    assert np.isnan(paired_difference(cell, base).equivalence_p)  # no margin, no test


def test_compare_within_groups_and_margins_reach_the_report(sweep_dir):
    """`compare_within` compares cells inside each group of an axis; the spec's margin adds TOST columns."""
    info = json.loads((sweep_dir / "sweep.json").read_text())
    cells = [{"name": f"{act},{norm}", "overrides": {"act": act, "norm": norm}}
             for act in ("relu", "gelu") for norm in ("ln", "rms")]  # fmt: skip
    rows = []
    for i, c in enumerate(cells):
        for seed in (0, 1, 2):
            loss = 2.0 + 0.1 * (c["overrides"]["act"] == "gelu") + 0.01 * i * seed + 0.001 * seed
            gelu = c["overrides"]["act"] == "gelu"  # only the gelu cells log val/acc
            rows.append({"cell": c["name"], "seed": seed, "status": "done", "val/loss": loss,
                         "val/acc": 0.5 + 0.01 * i * seed if gelu else ""})  # fmt: skip
    with (sweep_dir / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["cell", "seed", "status", "val/loss", "val/acc"])
        writer.writeheader()
        writer.writerows(rows)
    info |= {"cells": cells, "baseline": "relu,ln", "axes": ["act", "norm"], "compare_within": ["act"],
             "equivalence_margin": {"val/loss": 0.05}}  # fmt: skip
    (sweep_dir / "sweep.json").write_text(json.dumps(info))
    report.main([str(sweep_dir)])
    text = (sweep_dir / "report.md").read_text()
    assert "TOST p (±0.05)" in text and "Within groups of `act`" in text
    assert "| act=gelu | `gelu,rms` | `gelu,ln` |" in text and "| act=relu | `relu,rms` | `relu,ln` |" in text
    accuracy = text.split("### val/acc (higher")[1].split("###")[0]  # the relu cells log none: their group goes
    assert "| act=gelu | `gelu,rms` | `gelu,ln` |" in accuracy and "act=relu" not in accuracy
    assert "equivalence_margin names" not in text
    info["equivalence_margin"] = {"val/los": 0.05, "test/bleu": 1.0}  # misspelt; and a metric these runs never log
    (sweep_dir / "sweep.json").write_text(json.dumps(info))
    report.main([str(sweep_dir)])
    text = (sweep_dir / "report.md").read_text()
    assert "TOST" not in text.split("**Warning")[0]  # no column, and the header names no test
    assert ("**Warning:** equivalence_margin names `val/los`, which no compared run logged, so no equivalence test "
            "ran for it; did you mean `val/loss`?") in text  # fmt: skip
    assert (
        "equivalence_margin names `test/bleu`, which no compared run logged, so no equivalence test ran for it\n"
        in text
    )


@pytest.mark.parametrize(
    "entries, expected",
    [
        ({"equivalence_margin": {"val/loss": -1}}, "positive number"),
        ({"equivalence_margin": {"train/loss": 0.1}}, "not a validation or test metric"),
        ({"compare_within": "model.arch.nope"}, "some, not all, of the spec's axes"),
        ({"compare_within": ["model.arch.norm", "model.arch.activation"]}, "some, not all"),
    ],
)
def test_analysis_keys_are_validated(tmp_path, entries, expected):
    grid = {"model.arch.norm": ["layernorm", "rmsnorm"], "model.arch.activation": ["relu", "gelu"]}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"base": ["configs/gpt/base.yaml"], "grid": grid} | entries))
    with pytest.raises(SpecError, match=expected):
        load_spec(path)


def test_fairness_compares_trainable_parameters_when_the_ledger_has_them(sweep_dir):
    """Fine-tuning cells (LoRA, adapters) are compared on what they train, not on the frozen total: equal
    trainable counts do not warn even though totals differ by 20%, and unequal ones do, named as such."""
    path = sweep_dir / "results.csv"
    rows = list(csv.DictReader(path.open()))
    cases = (({"ln": 50, "rms": 50, "one": 50}, False), ({"ln": 50, "rms": 50, "one": 80}, True))
    for trainable, expect_warning in cases:
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=[*rows[0], "params_trainable"])
            writer.writeheader()
            writer.writerows(row | {"params_trainable": trainable[row["cell"]]} for row in rows)
        report.main([str(sweep_dir)])
        text = (sweep_dir / "report.md").read_text()
        assert ("trainable parameter counts differ by 60.0%" in text) == expect_warning
        assert "parameter counts differ by 20.0%" not in text
        main_table = text.split("### val/loss (lower")[1].split("###")[0]
        assert "| params | trainable | FLOPs/token |" in main_table
        assert f"| 1,200 | {trainable['one']} |" in main_table
        csv_rows = list(csv.DictReader((sweep_dir / "report.csv").open()))
        assert {r["cell"]: r["params_trainable"] for r in csv_rows} == {c: str(n) for c, n in trainable.items()}


def _main_table_with(sweep_dir, column: str, values: dict[str, list]) -> str:
    """The report's main table once the ledger has `column` (each cell's values by seed)."""
    path = sweep_dir / "results.csv"
    rows = list(csv.DictReader(path.open()))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*rows[0], column])
        writer.writeheader()
        writer.writerows(row | {column: values[row["cell"]][SEEDS.index(int(row["seed"]))]} for row in rows)
    report.main([str(sweep_dir)])
    return (sweep_dir / "report.md").read_text().split("### val/loss (lower")[1].split("###")[0]


def test_loss_spikes_are_a_column_of_the_main_table(sweep_dir):
    """Runs that record loss spikes (`LossSpikes`) get them counted per cell: the total and how many runs spiked;
    a ledger from before them keeps its columns."""
    report.main([str(sweep_dir)])
    assert "loss spikes" not in (sweep_dir / "report.md").read_text()
    spikes = {"ln": [0, 0, 0, 0, 0], "rms": [0, 3, 1, 0, ""], "one": [0, "", "", "", ""]}
    main_table = _main_table_with(sweep_dir, "loss_spikes", spikes)
    lines = {cell: next(line for line in main_table.splitlines() if f"`{cell}`" in line) for cell in spikes}
    head = next(line for line in main_table.splitlines() if line.startswith("| rank"))
    assert head.endswith("| FLOPs/token | loss spikes |")
    assert lines["ln"].endswith("| 0 |") and lines["one"].endswith("| 0 |")
    assert lines["rms"].endswith("| 4 (2/4 runs) |")  # the diverged run's spike counts too; the failed one has none


def test_a_cell_whose_done_runs_do_not_log_a_metric_is_named_under_its_table(sweep_dir):
    """A metric only some cells log (`test_avg/*` of the averaging cells): the others are named in one line under
    its table, not given rows of n/a; when the baseline is among them the table has no Δ columns, and a
    `compare_within` row touching them is left out. A cell whose runs diverged keeps its row."""
    path = sweep_dir / "results.csv"
    rows = list(csv.DictReader(path.open()))
    averaged = {"rms": lambda seed: 1.8 + 0.01 * seed, "one": lambda seed: 2.4}
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*rows[0], "val_avg/loss"])
        writer.writeheader()
        for row in rows:
            done = row["status"] == "done" and row["cell"] in averaged
            writer.writerow(row | {"val_avg/loss": averaged[row["cell"]](int(row["seed"])) if done else ""})
    report.main([str(sweep_dir)])
    text = (sweep_dir / "report.md").read_text()
    table = text.split("### val_avg/loss (lower")[1].split("###")[0]
    assert "`ln`" not in table.split("Not logged")[0] and "n/a | 0 |" not in table
    assert table.splitlines()[2] == "|  | cell | runs | mean ± std | n | 95% CI |"  # no Δ: the baseline lacks it
    assert "Not logged by the done runs of `ln`, the baseline among them: no Δ." in table
    assert "| ★ | `rms` | 3/5, 1 diverged, 1 failed | 1.8" in table and "| `one` | 1/5, 4 failed | 2.4000 |" in table
    main = text.split("### val/loss (lower")[1].split("###")[0]
    assert "Not logged" not in main and main.count("| `") == 3  # every cell logs the main metric


def test_a_metric_no_done_run_logged_gets_one_line_not_an_empty_table(sweep_dir):
    """Learned positions log no `val/loss@L` past their table, so a sweep of them has those ledger columns empty in
    every row: one line names them, instead of a table whose every cell is "not logged"."""
    path = sweep_dir / "results.csv"
    rows = list(csv.DictReader(path.open()))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*rows[0], "val/loss@256", "val/loss@512"])
        writer.writeheader()
        writer.writerows(row | {"val/loss@256": "", "val/loss@512": ""} for row in rows)
    report.main([str(sweep_dir)])
    text = (sweep_dir / "report.md").read_text()
    assert "### val/loss@256" not in text and "### val/loss@512" not in text
    assert "Logged by no done run: `val/loss@256`, `val/loss@512`." in text
    assert "### val/loss (lower is better) — main metric" in text


def test_a_classifiers_flops_are_headed_per_image(sweep_dir):
    """`ImageClassifier` records FLOPs per image (the ViT papers' unit), the other families per token."""
    report.main([str(sweep_dir)])
    assert "| FLOPs/token |" in (sweep_dir / "report.md").read_text()
    info = json.loads((sweep_dir / "sweep.json").read_text())
    for cell in info["cells"]:
        cell["resolved"] = {"model": {"class_path": "lit_modules.image_classifier.ImageClassifier"}}
    (sweep_dir / "sweep.json").write_text(json.dumps(info))
    report.main([str(sweep_dir)])
    text = (sweep_dir / "report.md").read_text()
    assert "| FLOPs/image |" in text and "FLOPs/token" not in text


def test_an_older_classifier_sweep_is_headed_per_image_from_its_runs_configs(sweep_dir):
    """A `sweep.json` from before cells recorded their resolved config: a run's own `config.yaml` names the class."""
    info = json.loads((sweep_dir / "sweep.json").read_text())
    assert not any(cell.get("resolved") for cell in info["cells"])
    cell, seed = next(iter(Ledger(sweep_dir / "results.csv").rows))
    config = sweep_dir / cell / f"seed{seed}" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("model:\n  class_path: lit_modules.ImageClassifier\n")
    report.main([str(sweep_dir)])
    text = (sweep_dir / "report.md").read_text()
    assert "| FLOPs/image |" in text and "FLOPs/token" not in text


def test_step_times_are_a_column_of_the_main_table(sweep_dir):
    """Runs that record their mean step time (`StepTime`) get the cell's mean ± std over its done runs; a ledger from
    before it keeps its columns."""
    report.main([str(sweep_dir)])
    assert "ms/step" not in (sweep_dir / "report.md").read_text()
    times = {"ln": [10, 12, 11, 10, 12], "rms": [9, 9.5, 30, 8.5, ""], "one": [20, "", "", "", ""]}
    main_table = _main_table_with(sweep_dir, "step_time_ms", times)
    assert next(line for line in main_table.splitlines() if line.startswith("| rank")).endswith("| ms/step |")
    lines = {cell: next(line for line in main_table.splitlines() if f"`{cell}`" in line) for cell in times}
    assert lines["ln"].endswith("| 11.0 ± 1.0 |") and lines["one"].endswith("| 20.0 |")
    assert lines["rms"].endswith("| 9.0 ± 0.5 |")  # the done runs only: not the diverged one's 30
