"""Thin LightningModules, one per task, over the models in `models/`."""

from .callbacks import DivergenceGuard, RunMetadata
from .causal_lm import CausalLM
from .image_classifier import ImageClassifier
from .masked_lm import MaskedLM, MaskingConfig
from .optim import OptimConfig
from .translation import Translation

__all__ = [
    "CausalLM",
    "MaskedLM",
    "MaskingConfig",
    "Translation",
    "ImageClassifier",
    "OptimConfig",
    "RunMetadata",
    "DivergenceGuard",
]
