"""The DataModules' shared base: every DataModule subclasses it, its fields are CLI flags of each, the data
flags of every committed run config still parse to the same values, and the labels use the one ignore index."""

import importlib
import inspect
import pkgutil
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch.nn.functional as F
import yaml
from jsonargparse import ArgumentParser

import datamodules
from datamodules import AlgorithmicDataModule, ImageDataModule, SuiteDataModule, TextDataModule, TranslationDataModule
from models.config import IGNORE_INDEX

ROOT = Path(__file__).resolve().parents[2]
DATAMODULES = [AlgorithmicDataModule, ImageDataModule, TextDataModule, TranslationDataModule]


def test_every_datamodule_subclasses_the_base() -> None:
    found = set()
    for info in pkgutil.iter_modules(datamodules.__path__):
        module = importlib.import_module(f"datamodules.{info.name}")
        found |= {
            obj
            for obj in vars(module).values()
            if inspect.isclass(obj) and issubclass(obj, pl.LightningDataModule) and obj.__module__ == module.__name__
        }
    assert found - {SuiteDataModule} == set(DATAMODULES)
    assert all(issubclass(cls, SuiteDataModule) for cls in DATAMODULES)


@pytest.mark.parametrize("cls", DATAMODULES)
def test_shared_fields_are_flags_of_each(cls: type[SuiteDataModule]) -> None:
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls)
    cfg = parser.parse_args(["--seed=3", "--num_workers=2", "--cache_dir=/nowhere"])
    dm = cls(**cfg.as_dict())
    assert (dm.seed, dm.num_workers, dm.data_dir, dm.cache_dir) == (3, 2, None, "/nowhere")
    assert dm.batch_size == inspect.signature(cls).parameters["batch_size"].default  # each keeps its own default
    keys = list(cfg.as_dict())
    assert keys[-4:] == ["seed", "num_workers", "data_dir", "cache_dir"]  # after the class's own, as before the base


def test_algorithmic_reads_no_files() -> None:
    with pytest.raises(ValueError, match="data_dir"):
        AlgorithmicDataModule(data_dir="data")


def _run_configs() -> list[Path]:
    return sorted(ROOT.glob("experiments/**/config.yaml"))


@pytest.mark.skipif(not _run_configs(), reason="no committed run config under experiments/")
def test_committed_run_configs_parse_to_the_same_data_values() -> None:
    """The saved ``config.yaml`` of every committed run re-runs: each data flag it sets is still accepted and
    keeps its value (unused ones included: algorithmic runs saved ``data_dir`` and ``cache_dir``)."""
    sections = {yaml.safe_load(p.read_text())["data"].__repr__(): p for p in _run_configs()}
    parsers: dict[str, ArgumentParser] = {}
    for path in sections.values():
        data = yaml.safe_load(path.read_text())["data"]
        if data["class_path"] not in parsers:
            module, name = data["class_path"].rsplit(".", 1)
            parsers[data["class_path"]] = parser = ArgumentParser(exit_on_error=False)
            parser.add_class_arguments(getattr(importlib.import_module(module), name))
        parsed = parsers[data["class_path"]].parse_object(data["init_args"]).as_dict()
        assert {k: parsed[k] for k in data["init_args"]} == data["init_args"], path


def test_ignore_index_is_cross_entropys_default_and_marks_unscored_labels() -> None:
    assert IGNORE_INDEX == inspect.signature(F.cross_entropy).parameters["ignore_index"].default
    labels = next(iter(AlgorithmicDataModule(num_train=16, batch_size=16).train_dataloader()))["labels"]
    assert set(labels.unique().tolist()) >= {IGNORE_INDEX} and labels.min() == IGNORE_INDEX
    tgt_out = next(iter(TranslationDataModule(batch_size=16).val_dataloader()))["tgt_out"]
    assert tgt_out.min() == IGNORE_INDEX  # padding of shorter targets
