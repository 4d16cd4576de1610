"""`cli.py prepare`: the same configs and flags as `fit`, tokenizing a user's files once into the store the run
then reuses (in-process, as `cli.py` calls it)."""

import pytest

import cli

CONFIGS = ["-c", "configs/gpt/base.yaml", "-c", "configs/gpt/tiny.yaml"]


def test_prepare_builds_the_store_once_and_then_reuses_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(cli.__file__.rsplit("/", 1)[0])
    (tmp_path / "a.txt").write_text("to be or not to be, that is the question\n" * 400)
    (tmp_path / "b.jsonl").write_text('{"text": "whether tis nobler in the mind to suffer"}\n' * 300)
    flags = ["--data.corpus=files", f"--data.train_files=[{tmp_path}/a.txt, {tmp_path}/b.jsonl]",
             f"--data.cache_dir={tmp_path}/cache", "--data.tokenizer=bpe", "--data.bpe_vocab_size=300"]  # fmt: skip
    assert cli.main(["prepare", *CONFIGS, *flags]) == 0
    first = capsys.readouterr().out
    assert "(built now)" in first and "tokenizer bpe" in first and "tokens: train " in first
    assert cli.main(["prepare", *CONFIGS, *flags]) == 0
    again = capsys.readouterr().out
    assert "(reused: already built)" in again and again.splitlines()[0].split()[2] in first
    stores = [p for p in (tmp_path / "cache" / "token_stores").iterdir() if p.is_dir()]
    assert len(stores) == 1 and (stores[0] / "train.bin").is_file() and (stores[0] / "manifest.json").is_file()


def test_prepare_reports_bad_files_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(cli.__file__.rsplit("/", 1)[0])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["prepare", *CONFIGS, "--data.corpus=files", f"--data.train_files={tmp_path}/*.txt"])
    usage, error = capsys.readouterr().err.strip().splitlines()[-2:]
    assert exit_.value.code == 2 and error == (
        f"error: data: data.train_files: the glob '{tmp_path}/*.txt' matches no file; check the path"
    )
    assert usage.startswith("usage: cli.py prepare [-c CONFIG.yaml ...]")  # this command's, not fit's
