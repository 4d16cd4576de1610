"""Shared Transformer blocks and the four models built from them (pure PyTorch, no Lightning)."""

from .bert import BertMLM
from .config import ArchConfig, default_d_ff
from .encoder_decoder import EncoderDecoder
from .gpt import GPT
from .vit import ViT

__all__ = ["ArchConfig", "default_d_ff", "GPT", "BertMLM", "EncoderDecoder", "ViT"]
