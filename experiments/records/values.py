"""Values as the CLI and the ledger spell them."""

from __future__ import annotations

import json
from typing import Any


def format_value(value: Any) -> str:
    """A value as the CLI (and the ledger) spells it: YAML/JSON for lists, maps, booleans and null."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None or isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return str(value)
