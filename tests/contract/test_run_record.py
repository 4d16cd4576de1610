"""`run.json` is a `RunRecord`: every committed one reads (schema version 1, without the key, or 2), reading and
writing loses no field, and a file of another version, or with a field missing, unknown or mistyped, is a
one-line error naming the file."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from contract.run_record import (
    ADDED_IN_2,
    SCHEMA_KEY,
    SCHEMA_VERSION,
    ProbeHeadlines,
    RunRecord,
    RunRecordError,
    TestRecord,
    read_run_record,
)
from tests.run_records import RECORD, write_record

ROOT = Path(__file__).resolve().parents[2]


def committed_run_jsons() -> list[str]:
    try:
        listed = subprocess.run(["git", "ls-files", "**/run.json"], cwd=ROOT, capture_output=True,
                                text=True, timeout=60)  # fmt: skip
    except OSError:
        pytest.skip("git is not installed")
    if listed.returncode != 0:
        pytest.skip(f"{ROOT} is not a git checkout")
    return listed.stdout.split()


def without_nulls(data: dict) -> dict:
    return {k: v for k, v in data.items() if v is not None and k != SCHEMA_KEY}


def test_every_committed_run_json_reads_and_keeps_every_field():
    """Each file reads; written back, it holds the same values (with the version, and an absent field of
    version 1 as null), and reads back to the same record."""
    paths = committed_run_jsons()
    assert len(paths) > 100, "the studies' results should hold hundreds of runs"
    versions = set()
    for path in paths:
        text = (ROOT / path).read_text()
        original = json.loads(text)
        versions.add(original.get(SCHEMA_KEY, 1))
        record = RunRecord.from_json(text, path)
        written = json.loads(record.to_json())
        assert written[SCHEMA_KEY] == SCHEMA_VERSION
        assert without_nulls(written) == without_nulls(original), path
        assert RunRecord.from_json(record.to_json(), path) == record, path
    assert 1 in versions  # the studies' runs predate the version key


def test_a_new_record_writes_todays_keys_and_the_version():
    """What `RunMetadata` wrote before the record had a type (`untyped_run.json`, a run of the day the record
    gained its version-2 fields), plus `schema_version`: the ledger and reports rebuild identically."""
    original = json.loads((Path(__file__).with_name("untyped_run.json")).read_text())
    assert set(ADDED_IN_2) <= set(original)
    assert RunRecord.from_dict(original).to_dict() == {SCHEMA_KEY: SCHEMA_VERSION, **original}


def test_marked_fields_are_written_once_set(tmp_path):
    probe = ProbeHeadlines(step=900, attn_max_logit=7.5, log_z=4.25)
    tested = TestRecord("last.ckpt", 12, "val", None, {"test/loss": 2.5})
    record = write_record(tmp_path, loss_spike_steps=(3, 9), loss_spikes=2, diagnostics=probe, test=tested)
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["diagnostics"] == {"step": 900, "attn_max_logit": 7.5, "log_z": 4.25}  # unset headlines left out
    assert data["test"] == {"checkpoint": "last.ckpt", "step": 12, "test_split": "val", "data_splits": None,
                            "metrics": {"test/loss": 2.5}}  # fmt: skip
    assert data["loss_spike_steps"] == [3, 9] and "diverged_at_step" not in data
    assert read_run_record(tmp_path) == record


def test_an_unknown_schema_version_is_a_one_line_error_naming_the_file(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps(RECORD.to_dict() | {SCHEMA_KEY: 7}))
    with pytest.raises(RunRecordError) as caught:
        read_run_record(tmp_path)
    message = str(caught.value)
    assert "\n" not in message and str(tmp_path / "run.json") in message
    assert "schema version 7" in message and "understood: 1, 2" in message


def test_version_2_requires_what_version_1_may_lack(tmp_path):
    data = RECORD.to_dict()
    del data["processes"]
    with pytest.raises(RunRecordError, match=r"run.json \(schema version 2\): missing processes"):
        RunRecord.from_dict(data)
    del data[SCHEMA_KEY]  # a file written before the version key
    assert RunRecord.from_dict(data).processes is None


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"stepz": 12}, "unknown field(s) stepz"),
        ({"params": "1000"}, "params: '1000' is not of type int"),
        ({"status": "finished"}, "status: 'finished' is not of type"),
        ({"diagnostics": {"step": 1, "attn_max": 2.0}}, "diagnostics: unknown field(s) attn_max"),
        ({"test": {"checkpoint": "last.ckpt"}}, "missing step, test_split, data_splits, metrics"),
    ],
)
def test_a_field_missing_unknown_or_mistyped_is_named(change, error):
    with pytest.raises(RunRecordError) as caught:
        RunRecord.from_dict(RECORD.to_dict() | change, "x/run.json")
    assert error in str(caught.value) and str(caught.value).startswith("x/run.json")


def test_a_missing_or_cut_short_file_is_no_record(tmp_path):
    assert read_run_record(tmp_path) is None
    (tmp_path / "run.json").write_text(RECORD.to_json()[:40])
    assert read_run_record(tmp_path) is None


def test_a_misspelt_field_cannot_be_set():
    with pytest.raises(TypeError):
        replace(RECORD, stepz=3)
