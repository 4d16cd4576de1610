"""LightningDataModules for the ablation suite; each takes ``seed``, ``batch_size``,
``num_workers``, ``data_dir`` and ``cache_dir`` and exposes ``data_checksum``."""

from datamodules.algorithmic import AlgorithmicDataModule
from datamodules.images import ImageDataModule
from datamodules.text import TextDataModule
from datamodules.translation import TranslationDataModule

__all__ = ["AlgorithmicDataModule", "ImageDataModule", "TextDataModule", "TranslationDataModule"]
