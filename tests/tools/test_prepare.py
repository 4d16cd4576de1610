"""`cli.py prepare`: the same configs and flags as `fit`, tokenizing a user's files once into the store the run
then reuses."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def prepare(*flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "cli.py", "prepare", "-c", "configs/gpt/base.yaml", "-c", "configs/gpt/tiny.yaml",
               *flags]  # fmt: skip
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_prepare_builds_the_store_once_and_the_run_reuses_it(tmp_path):
    (tmp_path / "a.txt").write_text("to be or not to be, that is the question\n" * 400)
    (tmp_path / "b.jsonl").write_text('{"text": "whether tis nobler in the mind to suffer"}\n' * 300)
    flags = ["--data.corpus=files", f"--data.train_files=[{tmp_path}/a.txt, {tmp_path}/b.jsonl]",
             f"--data.cache_dir={tmp_path}/cache", "--data.tokenizer=bpe", "--data.bpe_vocab_size=300"]  # fmt: skip
    first = prepare(*flags)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "(built now)" in first.stdout and "tokenizer bpe" in first.stdout and "tokens: train " in first.stdout
    again = prepare(*flags)
    assert "(reused: already built)" in again.stdout and again.stdout.splitlines()[0].split()[2] in first.stdout
    stores = [p for p in (tmp_path / "cache" / "token_stores").iterdir() if p.is_dir()]
    assert len(stores) == 1 and (stores[0] / "train.bin").is_file() and (stores[0] / "manifest.json").is_file()


def test_prepare_reports_bad_files_in_one_line(tmp_path):
    done = prepare("--data.corpus=files", f"--data.train_files={tmp_path}/*.txt")
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == (
        f"error: data: data.train_files: the glob '{tmp_path}/*.txt' matches no file; check the path"
    )
