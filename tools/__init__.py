"""The command-line tools that `cli.py` dispatches to: sweep, report, bench, export, samples, prepare,
parametrization."""
