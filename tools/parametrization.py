"""`python cli.py parametrization`: the table of every `model.arch.parametrization` (sp, µP, CompleteP) as the
optimizer and the initialisation apply it, in Markdown; the README's copy is this output (a test compares them)."""

from __future__ import annotations

import argparse

from models.parametrization import markdown_tables


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="cli.py parametrization", description=__doc__).parse_args(argv)
    print(markdown_tables(), end="")
    return 0
