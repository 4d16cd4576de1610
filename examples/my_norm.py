"""A variant of your own: RMSNorm with one learned scalar gain on top of its per-channel weight.

python cli.py fit -c configs/gpt/tiny.yaml --plugins examples/my_norm.py --model.arch.norm scaled_rmsnorm
"""

import torch
from torch import nn

from models.norms import register_norm


@register_norm("scaled_rmsnorm")
class ScaledRMSNorm(nn.Module):
    def __init__(self, dim: int, cfg):  # cfg: the run's models.config.ArchConfig
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=cfg.norm_eps)
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * self.norm(x)
