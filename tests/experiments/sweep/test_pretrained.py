"""`pretrained:` gives keys the files of another spec's run (a fine-tune's checkpoint and vocabulary),
found from that spec rather than spelt out: its only run (or the named cell and seed) in its sweep folder
`results/<its name>/` beside it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from experiments.sweep.spec import ROOT, SpecError, load_spec
from tests.conftest import BASE

PEFT = ROOT / "experiments" / "studies" / "peft"
FILES = {"model.init_from": "checkpoints/last.ckpt", "data.tokenizer_file": "tokenizer.json"}


def write(path: Path, **entries) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(entries, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "spec, run",
    [
        ("peft_gpt.yaml", "peft_pretrain/gpt/seed0"),
        ("peft_gpt_high_lr.yaml", "peft_pretrain/gpt/seed0"),
        ("peft_bert.yaml", "peft_pretrain_bert/bert/seed0"),
        ("peft_bert_high_lr.yaml", "peft_pretrain_bert/bert/seed0"),
        ("peft_gpt_tuned.yaml", "peft_pretrain_tuned/gpt/seed0"),
        ("peft_bert_tuned.yaml", "peft_pretrain_bert_tuned/bert/seed0"),
    ],
)
def test_the_peft_fine_tunes_start_from_their_pre_training_run(spec, run):
    fixed = load_spec(PEFT / spec).fixed
    folder = f"experiments/studies/peft/results/{run}"
    assert fixed["model.init_from"] == f"{folder}/checkpoints/last.ckpt"
    assert fixed["data.tokenizer_file"] == f"{folder}/tokenizer.json"


def test_the_run_is_the_other_specs_one_run_or_the_named_one(tmp_path):
    write(tmp_path / "pre.yaml", base=BASE, cells=[{"name": "small"}], seeds=[3])
    pretrained = {"spec": "pre.yaml", "files": FILES}
    spec = load_spec(write(tmp_path / "ft.yaml", base=BASE, cells=[{}], pretrained=pretrained))
    assert spec.fixed["model.init_from"] == str(tmp_path / "results/pre/small/seed3/checkpoints/last.ckpt")
    write(tmp_path / "pre2.yaml", base=BASE, grid={"model.arch.pos_encoding": ["rope", "alibi"]}, seeds=[0, 1])
    with pytest.raises(SpecError, match=r"pre2.yaml has cells \['pos_encoding=rope', 'pos_encoding=alibi'\]"):
        load_spec(write(tmp_path / "ft2.yaml", base=BASE, cells=[{}], pretrained={"spec": "pre2.yaml", "files": FILES}))
    named = {"spec": "pre2.yaml", "files": FILES, "cell": "pos_encoding=alibi", "seed": 1}
    spec = load_spec(write(tmp_path / "ft3.yaml", base=BASE, cells=[{}], pretrained=named))
    assert spec.fixed["data.tokenizer_file"] == str(tmp_path / "results/pre2/pos_encoding=alibi/seed1/tokenizer.json")
    with pytest.raises(SpecError, match="no run pos_encoding=alibi/seed2"):
        load_spec(write(tmp_path / "ft4.yaml", base=BASE, cells=[{}], pretrained=named | {"seed": 2}))


def test_a_variant_elsewhere_inherits_the_run_and_may_name_another(tmp_path):
    """`pretrained.spec` is a path from the file that gives it; a variant's keys replace the extended spec's."""
    write(tmp_path / "study/pre.yaml", base=BASE, cells=[{"name": "a"}])
    write(tmp_path / "study/pre_b.yaml", base=BASE, cells=[{"name": "b"}])
    write(tmp_path / "study/ft.yaml", base=BASE, cells=[{}], pretrained={"spec": "pre.yaml", "files": FILES})
    inherited = load_spec(write(tmp_path / "other/ft_more.yaml", extends="../study/ft.yaml", seeds=[0, 1]))
    assert inherited.fixed["model.init_from"] == str(tmp_path / "study/results/pre/a/seed0/checkpoints/last.ckpt")
    swapped = load_spec(write(tmp_path / "study/ft_b.yaml", extends="ft.yaml", pretrained={"spec": "pre_b.yaml"}))
    assert swapped.fixed["data.tokenizer_file"] == str(tmp_path / "study/results/pre_b/b/seed0/tokenizer.json")


@pytest.mark.parametrize(
    "pretrained, fixed, message",
    [
        ({"spec": "pre.yaml"}, {}, r"pretrained: needs \['files'\]"),
        ({"spec": "pre.yaml", "files": FILES, "run": 0}, {}, r"pretrained: unknown key\(s\) \['run'\]"),
        ({"spec": "gone.yaml", "files": FILES}, {}, "cannot read spec"),
        ({"spec": "pre.yaml", "files": FILES}, {"model.init_from": "x.ckpt"}, r"\['model.init_from'\] are also fixed"),
    ],
    ids=["no-files", "unknown-key", "missing-spec", "also-fixed"],
)
def test_a_bad_pretrained_block_is_a_spec_error(tmp_path, pretrained, fixed, message):
    write(tmp_path / "pre.yaml", base=BASE, cells=[{"name": "a"}])
    with pytest.raises(SpecError, match=message):
        load_spec(write(tmp_path / "ft.yaml", base=BASE, fixed=fixed, cells=[{}], pretrained=pretrained))
