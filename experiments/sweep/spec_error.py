"""The error of a sweep spec that cannot run."""

from __future__ import annotations


class SpecError(ValueError):
    """A spec that cannot run; raised before any run starts."""
