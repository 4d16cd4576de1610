"""A sweep folder's files, beside its cells' run folders (`DIR/<cell>/seed<k>/`, see `contract.run_folder`).

DIR/sweep.json     the spec as it ran (checked when the sweep resumes: the same sweep, or a refusal)
DIR/results.csv    the ledger: one row per run
DIR/report.md      the analysis, with report.csv and plots beside it
DIR/_summary/      the sweep's own TensorBoard run (the comparison across cells)
"""

from __future__ import annotations

SWEEP_INFO = "sweep.json"
LEDGER_NAME = "results.csv"
REPORT_NAME = "report.md"
SUMMARY_DIR = "_summary"
