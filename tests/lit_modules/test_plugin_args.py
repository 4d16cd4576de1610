"""A plugin's provenance in `run.json` (`RunRecord.plugins`), and the plugins a command names before its parser
is built (`lit_modules.plugin_args`)."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from contract.errors import ConfigError
from contract.plugins import plugin_list, plugin_source
from contract.run_record import PluginRecord, RunRecord
from lit_modules.plugin_args import plugin_names
from tests.run_records import RECORD


def test_a_record_with_plugins_reads_back_and_one_without_has_no_key(tmp_path):
    plugin = tmp_path / "norms.py"
    plugin.write_text("X = 1\n")
    source = plugin_source(plugin)
    assert source == PluginRecord(str(plugin), hashlib.sha256(b"X = 1\n").hexdigest(), None)
    record = replace(RECORD, plugins=(source,))
    assert RunRecord.from_json(record.to_json()) == record
    assert record.to_dict()["plugins"] == [{"path": str(plugin), "sha256": source.sha256}]
    assert "plugins" not in RECORD.to_dict() and RunRecord.from_dict(RECORD.to_dict()) == RECORD


def test_the_plugins_named_on_the_command_line_or_in_a_config_file_last_one_wins(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("plugins: [a.py, b.py]\ntrainer: {plugins: null}\n")
    assert plugin_names(["fit", "--plugins", "x.py"]) == ["x.py"]
    assert plugin_names(["fit", '--plugins=["x.py","pkg.mod"]']) == ["x.py", "pkg.mod"]
    assert plugin_names(["fit", "-c", str(config)]) == ["a.py", "b.py"]
    assert plugin_names(["fit", "-c", str(config), "--plugins=y.py"]) == ["y.py"]
    assert plugin_names(["fit", "--plugins=y.py", f"--config={config}"]) == ["a.py", "b.py"]
    assert plugin_names(["fit", "--trainer.plugins=x", "-c", str(tmp_path / "missing.yaml")]) == []
    assert plugin_names(["--config", config.read_text()]) == ["a.py", "b.py"]  # a rebuilt run's config as text
    with pytest.raises(ConfigError, match="plugins: needs a module path or a list of them, got 3"):
        plugin_list(3)
