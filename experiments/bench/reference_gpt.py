"""A plain-PyTorch GPT, written separately from `models/`, as the benchmark's baseline.

Same architecture as the suite's `GPT` with `pos_encoding="learned"`, `norm="layernorm"`,
`norm_placement="pre"`, `activation="gelu"`: learned positions, pre-LN blocks, a fused qkv
projection, causal `F.scaled_dot_product_attention`, a 4·d GELU MLP, a final LayerNorm and an
output head tied to the token embedding. Nothing here imports the suite, so the suite's own
abstractions (positional-scheme objects, stack context, residual closures) are what is measured.
`load_suite_weights` copies a suite GPT's weights in, so the two can be checked to agree.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class SelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, d_model: int, approximate: str):
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.proj = nn.Linear(4 * d_model, d_model)
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(F.gelu(self.fc(x), approximate=self.approximate))


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, approximate: str, eps: float):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model, eps=eps)
        self.attn = SelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model, eps=eps)
        self.mlp = MLP(d_model, approximate)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class ReferenceGPT(nn.Module):
    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        n_layers: int,
        n_heads: int,
        max_seq_len: int,
        gelu_approximate: str = "none",
        eps: float = 1e-5,
    ):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(max_seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, gelu_approximate, eps) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model, eps=eps)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.wte.weight  # tied
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, idx: Tensor) -> Tensor:
        """idx (B, T) -> logits (B, T, vocab)."""
        x = self.wte(idx) + self.wpe.weight[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    @classmethod
    def like(cls, cfg) -> ReferenceGPT:
        """The reference with the dimensions of a suite `ArchConfig` (the other fields must be the
        defaults listed in the module docstring)."""
        expected = {"pos_encoding": "learned", "norm": "layernorm", "norm_placement": "pre", "activation": "gelu"}
        wrong = {k: getattr(cfg, k) for k, v in expected.items() if getattr(cfg, k) != v}
        if wrong or not (cfg.bias and cfg.tie_embeddings and cfg.n_kv_heads in (None, cfg.n_heads)):
            raise ValueError(f"the reference GPT has one architecture; this config differs: {wrong or cfg}")
        if cfg.ffn_dim != 4 * cfg.d_model or cfg.attn_scale is not None or cfg.embed_scale != 1.0:
            raise ValueError("the reference GPT has a 4·d MLP, 1/sqrt(head_dim) scores and unscaled embeddings")
        return cls(
            cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.max_seq_len, cfg.gelu_approximate, cfg.norm_eps
        )

    @torch.no_grad()
    def load_suite_weights(self, gpt: nn.Module) -> ReferenceGPT:
        """Copy a suite `GPT`'s weights (same architecture) into this model."""
        src = gpt.state_dict()
        names = {"wte": "tok", "wpe": "stack.pos.table", "ln_f": "stack.final_norm"}
        for i in range(len(self.blocks)):
            b, s = f"blocks.{i}", f"stack.blocks.{i}"
            names |= {f"{b}.ln1": f"{s}.attn_norm", f"{b}.attn.qkv": f"{s}.attn.qkv", f"{b}.attn.proj": f"{s}.attn.out"}
            names |= {f"{b}.ln2": f"{s}.ffn_norm", f"{b}.mlp.fc": f"{s}.ffn.up", f"{b}.mlp.proj": f"{s}.ffn.down"}
        for name, tensor in self.state_dict().items():
            if name == "head.weight":
                continue  # tied to wte
            module, _, leaf = name.rpartition(".")
            tensor.copy_(src[f"{names[module]}.{leaf}"])
        return self
