"""The ffn_norm README's activation pairs: each activation minus another under the same norm, paired by
seed (`val/loss` in the sweep's ledger): the per-seed differences, their mean with its 95% CI and p
(`scipy.stats.ttest_rel`), beside Shazeer's Table 1 difference.

    python -m experiments.studies.ffn_norm.pair_table experiments/studies/ffn_norm/results/ffn_norm_2k
"""

from __future__ import annotations

from pathlib import Path

from contract.run_folder import DONE
from experiments.records.layout import LEDGER_NAME
from experiments.records.ledger import Ledger
from experiments.studies import ledger_figures as fig
from experiments.studies import table_script

# Shazeer 2020, Table 1: log-perplexity at 65,536 steps, parameter-matched d_ff
SHAZEER = {"relu": 1.997, "gelu": 1.983, "geglu": 1.942, "swiglu": 1.944}
NAMES = {"relu": "ReLU", "gelu": "GELU", "swiglu": "SwiGLU", "geglu": "GEGLU"}
PAIRS = (("swiglu", "gelu"), ("geglu", "gelu"), ("swiglu", "relu"), ("geglu", "relu"), ("gelu", "relu"),
         ("geglu", "swiglu"))  # fmt: skip
NORMS = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}
METRIC = "val/loss"


def cells(sweep_dir: Path) -> dict[tuple[str, str], str]:
    """(activation, norm) -> the cell's name."""
    rows = Ledger(sweep_dir / LEDGER_NAME).rows.values()
    return {(r["model.arch.activation"], r["model.arch.norm"]): r["cell"] for r in rows if r["status"] == DONE}


def pair(sweep_dir: Path, names: dict[tuple[str, str], str], a: str, b: str, norm: str) -> str:
    """`−0.038, −0.024, −0.036 → −0.033 [−0.052, −0.013], p = 0.019`: a − b under `norm`."""
    first, second = (fig.seeds(sweep_dir, names[act, norm], METRIC) for act in (a, b))
    c = fig.paired(first, second)
    return f"{fig.listed(fig.by_seed(first, second), sign=True)} → {fig.difference(c)}, p = {c.p_value:#.2g}"


def table(sweep_dir: Path) -> str:
    names = cells(sweep_dir)
    seeds = sorted({int(r["seed"]) for r in Ledger(sweep_dir / LEDGER_NAME).rows.values() if r["status"] == DONE})
    seed_text = ", ".join(map(str, seeds))
    lines = [
        f"Activations paired by seed under the same norm ({sweep_dir.name}, `{METRIC}`; "
        f"`python -m experiments.studies.ffn_norm.pair_table {sweep_dir}`): per-seed differences → mean "
        "[95% CI], p (scipy.stats.ttest_rel); paper: Shazeer's Table 1 difference (log-ppl at 65,536 steps).",
        "",
        "| difference | "
        + " | ".join(f"{title}: seeds {seed_text} → mean [95% CI], p" for title in NORMS.values())
        + " | paper |",
        "| --- | " + " | ".join("---" for _ in NORMS) + " | ---: |",
    ]
    for a, b in PAIRS:
        shown = " | ".join(pair(sweep_dir, names, a, b, norm) for norm in NORMS)
        lines.append(f"| {NAMES[a]} − {NAMES[b]} | {shown} | {fig.signed(SHAZEER[a] - SHAZEER[b])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return table_script.run(argv, __doc__, table, "pair_table.md")


if __name__ == "__main__":
    raise SystemExit(main())
