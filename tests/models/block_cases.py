"""What the block tests share (`test_block_axes`, `test_block_newer_axes`): a tiny config and its input
ids, the norm classes, a seeded GPT in eval mode, and a model's norm modules."""

import torch
from torch import nn

from models import GPT, ArchConfig
from models.norms import DynamicTanh

TINY = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=8, init_std=0.1)
IDS = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))
NORM_CLASSES = {"layernorm": nn.LayerNorm, "rmsnorm": nn.RMSNorm, "dyt": DynamicTanh}  # torch's fused kernels, DyT


def _gpt(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(ArchConfig(**{**TINY, **kw})).eval()


def _norm_modules(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, tuple(NORM_CLASSES.values()))]
