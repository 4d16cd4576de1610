"""LightningDataModules for the ablation suite; each subclasses :class:`SuiteDataModule` (``batch_size``,
``seed``, ``num_workers``, ``data_dir``, ``cache_dir``) and exposes ``data_checksum``."""

from datamodules.algorithmic import AlgorithmicDataModule
from datamodules.base import SuiteDataModule
from datamodules.images import ImageDataModule
from datamodules.text import TextDataModule
from datamodules.translation import TranslationDataModule

__all__ = ["AlgorithmicDataModule", "ImageDataModule", "SuiteDataModule", "TextDataModule", "TranslationDataModule"]
