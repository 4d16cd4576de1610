"""The plugins a command names (`models.plugins`), read from its words before the parser is built: the parser
only accepts a registered name once the plugin that registers it is imported."""

from __future__ import annotations

from pathlib import Path

import yaml

from contract.plugins import plugin_list

PLUGINS_KEY = "plugins"
CONFIG_FLAGS = ("-c", "--config")


def plugin_names(words: list[str]) -> list[str]:
    """The value of `--plugins` among `words`, or of `plugins:` in a config file they give (`-c FILE`); the last
    one given wins, as in the parser."""
    found: object = None
    for i, word in enumerate(words):
        flag, eq, value = word.partition("=")
        if not eq:
            value = words[i + 1] if i + 1 < len(words) else ""
        if flag == f"--{PLUGINS_KEY}":
            found = yaml.safe_load(value) if value.strip() else None
        elif flag in CONFIG_FLAGS and value:
            found = _from_config(value, found)
    return plugin_list(found)


def _from_config(value: str, found: object) -> object:
    """`plugins:` of a config file, or of a config given as YAML text (`cli.py samples`/`export` rebuild a run so)."""
    try:
        path = Path(value)
        data = yaml.safe_load(path.read_text() if "\n" not in value and path.is_file() else value)
    except (OSError, ValueError, yaml.YAMLError):  # the parser says what is wrong with it
        return found
    if isinstance(data, dict) and PLUGINS_KEY in data:
        return data[PLUGINS_KEY]
    return found
