"""What the four models share: token embeddings, initialisation, parameter and FLOP counts."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .config import ArchConfig
from .parametrization import Role


class TokenEmbedding(nn.Embedding):
    """Token lookup times `cfg.embed_scale` (sqrt(d_model) for sinusoidal, as in Vaswani et al.), or times a
    learned scalar `gain` in its place (`cfg.learns_embed_scale`: DyT's LLaMA recipe)."""

    def __init__(self, cfg: ArchConfig):
        super().__init__(cfg.vocab_size, cfg.d_model)
        self.scale = cfg.embed_scale  # the fixed factor; it also sets the table's init (init_weights)
        self.gain = nn.Parameter(torch.full((1,), cfg.embed_width**0.5)) if cfg.learns_embed_scale else None

    def forward(self, ids: Tensor) -> Tensor:
        x = super().forward(ids)
        if self.gain is not None:
            return x * self.gain
        return x * self.scale if self.scale != 1.0 else x


def scaled(x: Tensor, factor: float) -> Tensor:
    """x·factor, or x itself at 1 (a parametrization's multiplier; `sp` computes exactly as before)."""
    return x if factor == 1.0 else x * factor


class TransformerModel(nn.Module):
    """Base of the four models: init, parametrization roles, parameter counts and forward FLOPs."""

    cfg: ArchConfig
    causal: bool = False
    readout_name: str = "lm_head"  # the output projection (`models.parametrization`'s readout)

    def init_weights(self) -> None:
        """Normal(0, init_std) for matrices and embeddings, zero biases, unit norms; GPT-2's
        scaled init (std / sqrt(2·depth of its stack)) on the projections that write to the residual;
        Normal(0, 1/d_model) for token embeddings scaled by sqrt(d_model), fixed or learned. Under µP and
        CompleteP each std takes its role's factor (`models.parametrization`): σ/√m_N for hidden matrices."""
        cfg, roles = self.cfg, self.parameter_roles()
        for name, module in self.named_modules():
            if isinstance(module, TokenEmbedding) and module.gain is not None:
                nn.init.constant_(module.gain, cfg.embed_width**0.5)
            if isinstance(module, TokenEmbedding) and (module.scale != 1.0 or module.gain is not None):
                # A scaled lookup starts at N(0, 1/d) so that ×sqrt(d) gives unit variance: the amplitude of
                # the sinusoids it is added to (Vaswani et al. 2017 §3.4; fairseq and tensor2tensor init; with
                # 0.02 the positions would outweigh the tokens 3:1 at d=128), and what DyT's first norm needs,
                # having no statistics to rescale its input (see `ArchConfig.learn_embed_scale`).
                nn.init.normal_(module.weight, std=cfg.embed_width**-0.5)
            elif isinstance(module, (nn.Linear, nn.Embedding)):
                role, depth = roles[id(module.weight)]
                std = cfg.init_std * cfg.scheme.roles[role].init_std(cfg.width_mult)
                if cfg.scaled_residual_init and name.endswith((".out", ".down")):
                    depth = cfg.base_depth or depth if cfg.scheme.scaled_init_base_depth else depth
                    std /= math.sqrt(2 * depth)
                nn.init.normal_(module.weight, std=std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def parameter_roles(self) -> dict[int, tuple[Role, int]]:
        """id(parameter) -> its role in the parametrization and the depth of the stack holding it.

        A tied readout is the token table (an embedding); a module with a `parametrization_role` (PEFT's
        adapters) gives it to its parameters, as do LoRA's matrices (`adapter`)."""
        readout = getattr(self, self.readout_name).weight
        tables = {id(m.weight) for m in self.modules() if isinstance(m, nn.Embedding)}
        given = {id(p): m.parametrization_role for m in self.modules() if hasattr(m, "parametrization_role")
                 for p in m.parameters()}  # fmt: skip
        linear = {id(m.weight) for m in self.modules() if isinstance(m, nn.Linear)}
        roles = {}
        for name, p in self.named_parameters():
            if id(p) in given or ".lora_" in name:
                role = given.get(id(p), "adapter")
            elif id(p) in tables:
                role = "embedding"
            elif p is readout:
                role = "readout"
            elif id(p) in linear:
                role = "hidden"
            elif p.ndim <= 1:
                role = "block_vector" if ".blocks." in f".{name}" else "vector"
            else:
                role = "embedding"
            roles[id(p)] = (role, self._depth(name))
        return roles

    def optimizer_factors(self) -> dict[int, tuple[float, float, float]]:
        """id(parameter) -> the factors of its Adam lr, ε and weight decay (`models.parametrization`)."""
        cfg = self.cfg
        factors = {}
        for key, (role, depth) in self.parameter_roles().items():
            rule, m_depth = cfg.scheme.roles[role], cfg.depth_mult(depth)
            factors[key] = tuple(f(cfg.width_mult, m_depth) for f in (rule.lr, rule.eps, rule.weight_decay))
        return factors

    def task_args(self) -> dict:
        """The constructor's arguments besides `cfg` (ViT's image task); none for the language models."""
        return {}

    def rebuilt(self, cfg: ArchConfig) -> TransformerModel:
        """A new model of this class and task built from `cfg`, freshly initialised (`models.parametrization_fold`)."""
        return type(self)(cfg, **self.task_args())

    def readout_input(self, h: Tensor) -> Tensor:
        """The readout's input times the parametrization's output multiplier (1/m_N under µP)."""
        return scaled(h, self.cfg.scheme.readout(self.cfg.width_mult))

    def _embedding_parameters(self) -> set[int]:
        """Lookup tables: token embeddings, learned positions, relative-bias tables."""
        return {id(m.weight) for m in self.modules() if isinstance(m, nn.Embedding)}

    def num_parameters(self, non_embedding: bool = False) -> int:
        """Unique parameters (tied matrices once); `non_embedding` leaves out lookup tables."""
        skip = self._embedding_parameters() if non_embedding else set()
        return sum(p.numel() for p in self.parameters() if id(p) not in skip)

    def matmul_parameters(self) -> int:
        """Weights used in matmuls per token: every Linear's weight (incl. a tied output head)."""
        return sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Linear))

    def flops_per_token(self, seq_len: int, include_attention: bool = True) -> float:
        """Forward FLOPs per token: 2·N_matmul, plus 4·T·d per layer for QKᵀ and AV
        (halved for causal attention, which only sees the past). Training ≈ 3× this."""
        flops = 2.0 * self.matmul_parameters()
        if include_attention:
            attn = 4.0 * seq_len * self.cfg.n_heads * self.cfg.d_head * self._attention_layers()
            flops += attn / 2 if self.causal else attn
        return flops

    def _attention_layers(self) -> int:
        return self.cfg.n_layers

    def _depth(self, name: str) -> int:
        """Blocks of the stack holding the module `name` (the scaled init's depth)."""
        return self.cfg.n_layers
