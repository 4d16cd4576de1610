"""Conventions the data and the models share without importing each other."""

from __future__ import annotations

IGNORE_INDEX = -100  # label of positions without a loss: F.cross_entropy's default ignore_index
