"""`python cli.py prepare -c CONFIG.yaml [--data.KEY VALUE ...]`: get a run's data ready before training.

Takes the same configs and flags as `cli.py fit` and runs only the DataModule's `prepare_data`: a download for a
named dataset; for `--data.corpus files`, the tokenization into the token store that every later run with the
same files and tokenizer reuses (the first run would do it otherwise, with its processes waiting). Prints where
the store is and what it holds.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings

from lit_modules.config_messages import INSTANTIATION_ERRORS, as_config_error
from lit_modules.suite_cli import LIGHTNING_LOGGERS, SuiteCLI, cli_main


class PrepareCLI(SuiteCLI):
    """The suite's CLI, preparing the data as soon as the classes are built: what the DataModule raises there
    (a missing file, a bad record) is a one-line error, as in `fit`."""

    usage_command = "cli.py prepare"

    def instantiate_classes(self) -> None:
        super().instantiate_classes()
        try:
            self.datamodule.prepare_data()
        except INSTANTIATION_ERRORS as err:
            error = as_config_error(err, only="data")
            if error is None:
                raise
            raise error from err


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    started = time.monotonic()
    for name in LIGHTNING_LOGGERS:  # no trainer runs: its notes (devices, tips) are noise here
        logging.getLogger(name).setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")  # cli.py's own words
        datamodule = cli_main(argv, run=False, cli_class=PrepareCLI).datamodule
    seconds = time.monotonic() - started
    store = getattr(datamodule, "prepared_store", None)  # a DataModule reading a token store has one
    if store is None:
        print(f"prepared {type(datamodule).__name__}: data sha256 {datamodule.data_checksum} ({seconds:.1f} s)")
        return 0
    manifest = store.manifest
    tokens = ", ".join(f"{split} {count:,}" for split, count in manifest["tokens"].items())
    built = manifest["seconds"]
    print(f"token store {store.directory} ({'built now' if store.built else 'reused: already built'})")
    tokenizer = manifest["tokenizer"]
    print(f"  tokens: {tokens} ({manifest['dtype']}); tokenizer {tokenizer['kind']}, "
          f"vocabulary {tokenizer['vocab_size']:,} (sha256 {tokenizer['sha256'][:12]})")  # fmt: skip
    print(f"  tokenized in {built:.1f} s ({sum(manifest['tokens'].values()) / max(built, 1e-9):,.0f} tokens/s); "
          f"this command {seconds:.1f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
