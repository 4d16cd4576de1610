"""The suite's command line.

python cli.py fit -c configs/gpt/base.yaml -c configs/gpt/tiny.yaml --model.arch.pos_encoding alibi
python cli.py fit -c configs/gpt/base.yaml --model.help CausalLM    a model's keys (a DataModule's: --data.help
                                                                    datamodules.text.TextDataModule)
python cli.py {fit,validate,test,predict} ...      LightningCLI (subclass mode for model and data)
python cli.py sweep SPEC.yaml [--out DIR] [--jobs N|auto] [--threads T] [--launcher pool|local|slurm] [--dry-run]
                           [--retry-failed] [--rerun CELL ...] [--no-warm]
python cli.py report DIR
python cli.py prepare -c CONFIG.yaml [--data.KEY VALUE ...]           download / tokenize once (a token store)
python cli.py bench [--smoke] [--sections a,b] [--compile]
python cli.py samples DIR [--prompt TEXT]                                 one continuation per cell of a sweep
python cli.py export --config RUN/config.yaml --ckpt_path CKPT --out DIR   the transformers / timm equivalent
python cli.py parametrization                                           the sp / µP / CompleteP table
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
import threading
import warnings

import torch

from contract.disk import disk_full, disk_full_line

# Denormal floats (below 1.2e-38) take a slow microcode path on x86 CPUs. ALiBi's distant keys put softmax's
# exp(score − max) there (−m·distance reaches −256 at T = 1,024), which made its CPU training step twice
# `none`'s; flushed to zero, no value above 1e-38 changes. Set before anything starts torch's thread pool,
# whose threads inherit it (tests/test_cli_entry.py); GPUs are unaffected.
torch.set_flush_denormal(True)

# Library deprecations that are not the user's business, each printed once per process in every run:
# Lightning 2.6's pytree helper still calls torch's deprecated `isinstance(treespec, LeafSpec)`.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated")
# Where SLURM is installed (a cluster's login node), Lightning suggests `srun` for every trainer of a process SLURM
# did not start, several times per command (`samples`: once per cell); the suite's runs are deliberately not (the
# slurm launcher's are: `srun` starts them, and then Lightning is silent). Its hint also quotes the command line.
warnings.filterwarnings("ignore", message="The `srun` command is available on your system but is not used")
# On a mid-epoch resume Lightning warns that the data loader "is not resumable"; the suite's training batches resume
# mid-epoch themselves, skipping what the restored step consumed (`datamodules.sampling.resumable_batches`; a resumed
# run ends as an uninterrupted one: tests/experiments/sweep/test_sweep_runs.py), which Lightning cannot see.
warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before the epoch ended")

from lit_modules.suite_cli import DEBUG_VAR, cli_main  # noqa: E402  (after the flush: importing Lightning starts the pool)


def _quiet_full_disk(args: threading.ExceptHookArgs) -> None:
    """A thread's full disk (TensorBoard's event writer re-raises its write's) is said once, in `main`'s line: the
    main thread meets it at its next write there; any other thread's exception prints as before."""
    if disk_full(args.exc_value) is None:
        threading.__excepthook__(args)


threading.excepthook = _quiet_full_disk

TOOLS = {
    "sweep": "tools.sweep",
    "report": "tools.report",
    "bench": "tools.bench",
    "export": "tools.export",
    "samples": "tools.samples",
    "prepare": "tools.prepare",
    "parametrization": "tools.parametrization",
}


LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")


def _unknown_command(words: list[str]) -> str | None:
    """The error for a first word that is no command (LightningCLI's own names only its four subcommands)."""
    if not words:
        return "a command is needed"
    first = words[0]
    if first.startswith("-") or first in TOOLS or first in LIGHTNING_COMMANDS:
        return None
    close = difflib.get_close_matches(first, [*LIGHTNING_COMMANDS, *TOOLS], n=1)
    return f"unknown command {first!r}" + (f"; did you mean {close[0]}?" if close else "")


def main(argv: list[str] | None = None) -> int:
    """Runs a tool or a LightningCLI subcommand; a full disk ends it with one line on stderr (the path, the free
    space there, what to do) and exit status 1, not a traceback (unless `SUITE_DEBUG` is set). Help (`-h`, or no
    command) lists every command, the suite's tools with LightningCLI's."""
    words = sys.argv[1:] if argv is None else argv
    if words[:1] in (["-h"], ["--help"]):
        print(__doc__)  # then LightningCLI's own help, for its options
    elif problem := _unknown_command(words):
        print(f"{__doc__}\nerror: {problem}", file=sys.stderr)
        return 2
    try:
        if words and words[0] in TOOLS:
            return importlib.import_module(TOOLS[words[0]]).main(words[1:])
        cli_main(argv)
    except Exception as err:
        full = disk_full(err)
        if full is None or os.environ.get(DEBUG_VAR):
            raise
        print(disk_full_line(full), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
