"""A table or verdict a study README quotes is its script's output on the committed ledgers, row for row
and line for line, and the committed output file is what the script gives now, so neither a README nor a
committed table can drift from its ledger. The figures READMEs quote in prose are in
test_readme_quotes.py and readme_positional_figures.py."""

from __future__ import annotations

import pytest

from experiments.studies import stream_at_init
from experiments.studies.dyt import verdict as dyt_verdict
from experiments.studies.extrapolation import ladder_verdict as extrapolation_ladder_verdict
from experiments.studies.ffn_norm import ladder_verdict as ffn_ladder_verdict
from experiments.studies.ffn_norm import pair_table
from experiments.studies.mlm_positional import tuned_verdict as mlm_verdict
from experiments.studies.mup import verdict as mup_verdict
from experiments.studies.norm_placement import budget_verdict, loss_table
from experiments.studies.norm_placement import tuned_verdict as norm_verdict
from experiments.studies.peft import tuned_verdict as peft_verdict
from experiments.studies.peri_ln import verdict as peri_ln_verdict
from experiments.studies.scan_length import split_table
from experiments.studies.scan_length import tuned_verdict as scan_verdict
from experiments.studies.schedules import verdict as schedules_verdict
from experiments.studies.stability import verdict as stability_verdict
from tests.experiments.studies.readme_figures import ROOT, STUDIES, normalized, results


def table_rows(text: str) -> list[str]:
    """A markdown table's data rows (not its header or rule)."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    header = {i + 1 for i, line in enumerate(lines) if i + 1 < len(lines) and lines[i + 1].startswith("| ---")}
    return [line for i, line in enumerate(lines) if not line.startswith("| ---") and i + 1 not in header]


def without_seeds_column(row: str) -> str:
    """The EOS rows as the scan_length README shows them: without split_table's `seeds` column."""
    cells = row.split(" | ")
    return " | ".join(cells[:2] + cells[3:]) if len(cells) == 7 else row  # split | scheme | seeds | 4 shares


# (study, sweep folder, table script, its committed output, how the README shows a row)
TABLES = [
    ("scan_length", "scan_length", split_table, "split_table.md", without_seeds_column),
    ("ffn_norm", "ffn_norm_2k", pair_table, "pair_table.md", str),
    ("norm_placement", "norm_placement", loss_table, "loss_table.md", str),
    ("peft", "peft_gpt_tuned", peft_verdict, "tuned_verdict.md", str),
    ("peft", "peft_bert_tuned", peft_verdict, "tuned_verdict.md", str),
    ("peft", "peft_bert_tuned_rerun", peft_verdict, "tuned_verdict.md", str),
    ("ffn_norm", "ffn_norm_ladder", stream_at_init, "stream_at_init.md", str),
    ("dyt", "dyt_gpt_rerun", stream_at_init, "stream_at_init.md", str),
]


@pytest.mark.parametrize(("study", "spec", "script", "output", "shown"), TABLES, ids=[f"{t[0]}-{t[1]}" for t in TABLES])
def test_readme_tables_are_their_scripts_output(study, spec, script, output, shown, monkeypatch):
    """A table a README quotes is its script's output on the committed results, row for row, and the
    committed output file is what the script gives now."""
    monkeypatch.chdir(ROOT)  # the scripts name the folder as given: the README's command gives it from the root
    sweep = results(study, spec).relative_to(ROOT)
    text = script.table(sweep)
    assert text == (sweep / output).read_text(), (
        f"{sweep / output} is stale: re-run python -m {script.__name__} {sweep}"
    )
    readme = (STUDIES / study / "README.md").read_text().splitlines()
    missing = [shown(row) for row in table_rows(text) if shown(row) not in readme]
    assert not missing, f"{study}/README.md lacks these rows of {output}:\n" + "\n".join(missing)


# (study, verdict script, its sweep folders in the order it takes them): a tuned study's verdict lines
VERDICTS = [
    ("norm_placement", norm_verdict, ("norm_placement_tuned",), "tuned_verdict.md"),
    ("norm_placement", budget_verdict, ("norm_placement_budget",), "budget_verdict.md"),
    ("mlm_positional", mlm_verdict, ("mlm_positional_tuned", "mlm_positional_tuned_scale"), "tuned_verdict.md"),
    ("scan_length", scan_verdict, ("scan_length_tuned",), "tuned_verdict.md"),
    ("ffn_norm", ffn_ladder_verdict, ("ffn_norm_ladder",), "ladder_verdict.md"),
    ("ffn_norm", ffn_ladder_verdict, ("ffn_norm_ladder_mup",), "ladder_verdict.md"),
    ("ffn_norm", ffn_ladder_verdict, ("ffn_norm_ladder_rerun",), "ladder_verdict.md"),
    ("extrapolation", extrapolation_ladder_verdict, ("extrapolation_ladder",), "ladder_verdict.md"),
    ("stability", stability_verdict, ("qk_norm_zloss",), "verdict.md"),
    ("stability", stability_verdict, ("qk_norm_zloss_rerun",), "verdict.md"),
    ("dyt", dyt_verdict, ("dyt_gpt", "dyt_vit", "dyt_vit_wide", "dyt_gpt_wide"), "verdict.md"),
    ("dyt", dyt_verdict, ("dyt_gpt_rerun", "dyt_vit_rerun"), "verdict.md"),
    ("peri_ln", peri_ln_verdict, ("peri_ln", "peri_ln_embedding_norm", "peri_ln_reordered_qk_norm"), "verdict.md"),
    ("mup", mup_verdict, ("mup_width",), "verdict.md"),
    ("mup", mup_verdict, ("mup_width", "mup_width_anchored"), "verdict.md"),
    ("mup", mup_verdict, ("completep_depth",), "verdict.md"),
    ("schedules", schedules_verdict, ("wsd_horizons", "cosine_horizons"), "verdict.md"),
]
WRITTEN_BESIDE_THE_POST_HOC = {("mup_width", "mup_width_anchored")}  # the pre-registered verdict stays beside its own


@pytest.mark.parametrize(("study", "script", "folders", "output"), VERDICTS, ids=["+".join(v[2]) for v in VERDICTS])
def test_readme_verdicts_are_their_scripts_output(study, script, folders, output, monkeypatch):
    """A tuned study's (or ladder's) verdict lines are its script's output on the committed ledgers (the folders
    committed so far), the committed verdict file is that output, and the README quotes every line."""
    monkeypatch.chdir(ROOT)
    sweeps = [results(study, f).relative_to(ROOT) for f in folders if (results(study, f) / "results.csv").exists()]
    lines = script.verdicts(*sweeps)
    written = sweeps[-1] if folders in WRITTEN_BESIDE_THE_POST_HOC else sweeps[0]
    assert "\n".join(lines) + "\n" == (written / output).read_text(), (
        f"{sweeps[0]}/{output} is stale: re-run python -m {script.__name__} {' '.join(map(str, sweeps))}"
    )
    readme = normalized((STUDIES / study / "README.md").read_text())
    missing = [line for line in lines if normalized(line.removeprefix("- ")) not in readme]
    assert not missing, f"{study}/README.md lacks these verdict lines:\n" + "\n".join(missing)
