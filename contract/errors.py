"""The one error class for a configuration the user has to fix."""

from __future__ import annotations


class ConfigError(ValueError):
    """A value or combination in a run's configuration that cannot run. The message names the field,
    the value and the fix; `cli.py` prints it in one line, without a traceback (`lit_modules.suite_cli`)."""
