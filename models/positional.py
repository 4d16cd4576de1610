"""Positional schemes behind one interface, so attention never branches on a scheme's name.

A stack asks its scheme three questions once per forward, and hands the answers to every layer:
  embed(x, offset)                 -> x with positions added        (sinusoidal, learned)
  rotary(length, offset)           -> (cos, sin) to rotate q and k   (rope)
  score_bias(q_len, k_len, offset) -> a score bias per head and key − query distance (alibi, t5)
`offset` is the number of positions already in the KV cache.

Each scheme also carries its facts, so no other file tests a scheme's name: `facts` (the
torch-free `PositionalFacts` of `config.py`: whether it scales token embeddings, whether ViT has a
form of it) and `max_positions`, the longest sequence it supports (a learned table's rows; `None`
for the schemes that run at any length).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

import torch
from torch import Tensor, nn

from .config import (
    POSITIONAL_FACTS,
    ArchConfig,
    ConfigError,
    PosEncoding,
    PositionalFacts,
    SinusoidalLayout,
    register_name,
)
from .plugin_checks import probe_function, variant_owner
from .relative_bias import RelativeBias


class PositionalScheme(nn.Module):
    """No positional information (NoPE); the other schemes override one method each."""

    facts: ClassVar[PositionalFacts] = POSITIONAL_FACTS["none"]

    @property
    def max_positions(self) -> int | None:
        """The longest sequence this scheme can position; `None`: any length."""
        return None

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        return x

    def rotary(self, length: int, offset: int = 0) -> tuple[Tensor, Tensor] | None:
        return None

    def score_bias(self, q_len: int, k_len: int, offset: int = 0) -> RelativeBias | None:
        return None


def _interleaved(sin: Tensor, cos: Tensor) -> Tensor:
    table = torch.zeros(sin.shape[0], sin.shape[1] + cos.shape[1], dtype=sin.dtype)
    table[:, 0::2], table[:, 1::2] = sin, cos
    return table


# layout -> (dtype of the angles, how the sines and cosines are laid out). The interleaved table is
# the suite's float32 one, which its results were trained with; the halves table is computed in
# float64 and rounded, as Marian's (numpy) is, so a converted model's table is the reference's to the bit.
SINUSOIDAL_LAYOUTS: dict[SinusoidalLayout, tuple[torch.dtype, Callable[[Tensor, Tensor], Tensor]]] = {
    "interleaved": (torch.float32, _interleaved),
    "halves": (torch.float64, lambda sin, cos: torch.cat((sin, cos), dim=-1)),
}


def sinusoidal_table(
    length: int, dim: int, layout: SinusoidalLayout = "interleaved", positions: Tensor | None = None
) -> Tensor:
    """Vaswani et al. 2017: sin(p / 10000^(2i/d)) and cos(same) for i < d/2, float32 (length, dim).
    `interleaved`: PE[p, 2i] = sin, PE[p, 2i+1] = cos; `halves`: PE[p, i] = sin, PE[p, ceil(d/2) + i] = cos.
    `positions`: the `length` values of p (fractional ones too); default 0, 1, ..., length - 1."""
    dtype, arrange = SINUSOIDAL_LAYOUTS[layout]
    position = (torch.arange(length) if positions is None else positions).to(dtype)[:, None]
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=dtype) * (-math.log(10000.0) / dim))
    table = arrange(torch.sin(position * inv_freq), torch.cos(position * inv_freq[: dim // 2]))
    return table.float()


class SinusoidalPositions(PositionalScheme):
    facts = POSITIONAL_FACTS["sinusoidal"]

    def __init__(self, cfg: ArchConfig, causal: bool):
        super().__init__()
        self.dim, self.layout = cfg.d_model, cfg.sinusoidal_layout
        # a fixed function of the position: the table is a cache, grown on demand from any start
        table = sinusoidal_table(cfg.max_seq_len or 0, cfg.d_model, self.layout)
        self.register_buffer("table", table, persistent=False)

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        end = offset + x.shape[1]
        if end > self.table.shape[0]:  # fixed function: extend for extrapolation
            self.table = sinusoidal_table(2 * end, self.dim, self.layout).to(self.table)
        return x + self.table[offset:end]


class LearnedPositions(PositionalScheme):
    """One learned row per position: `length` rows (ViT: its token count), else `cfg.max_seq_len`,
    after `cfg.learned_pos_offset` rows that are never read (BART's table starts at row 2)."""

    facts = POSITIONAL_FACTS["learned"]

    def __init__(self, cfg: ArchConfig, causal: bool, length: int | None = None):
        super().__init__()
        length = length or cfg.max_seq_len
        if length is None:
            raise ValueError(
                "pos_encoding='learned' needs max_seq_len (the rows of its table); set it, or build the "
                "model through a task module, which takes it from the data"
            )
        self.first = cfg.learned_pos_offset
        self.table = nn.Embedding(self.first + length, cfg.d_model)

    @property
    def max_positions(self) -> int:
        return self.table.num_embeddings - self.first

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        end = offset + x.shape[1]
        if end > self.max_positions:
            raise ValueError(
                f"sequence of {end} positions is longer than max_seq_len={self.max_positions} "
                f"of pos_encoding='learned'; raise max_seq_len or use a relative scheme"
            )
        return x + self.table.weight[self.first + offset : self.first + end]


class RotaryPositions(PositionalScheme):
    """RoPE (Su et al.), rotate-half layout as in Llama/GPT-NeoX, on the first rotary_dim dims."""

    facts = POSITIONAL_FACTS["rope"]

    def __init__(self, cfg: ArchConfig, causal: bool):
        super().__init__()
        self.base, self.dim = cfg.rope_base, cfg.rotary_dim
        self._cache: tuple[int, Tensor, Tensor] | None = None
        self._grow(cfg.max_seq_len or 0)  # a cache: grown on demand

    def _grow(self, length: int, device=None) -> None:
        inv_freq = 1.0 / self.base ** (torch.arange(0, self.dim, 2, dtype=torch.float32, device=device) / self.dim)
        angles = torch.outer(torch.arange(length, dtype=torch.float32, device=device), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)  # (T, rotary_dim)
        self._cache = (length, angles.cos(), angles.sin())

    def rotary(self, length: int, offset: int = 0) -> tuple[Tensor, Tensor]:
        end = offset + length
        if end > self._cache[0]:
            self._grow(2 * end, self._cache[1].device)
        return self._cache[1][offset:end], self._cache[2][offset:end]

    def _apply(self, fn: Callable, recurse: bool = True):  # keep the table cache on the module's device
        super()._apply(fn, recurse)
        if self._cache is not None:
            self._cache = (self._cache[0], fn(self._cache[1]), fn(self._cache[2]))
        return self


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate (B, H, T, head_dim) by (T, rotary_dim) tables; dims past rotary_dim pass through."""
    rot = cos.shape[-1]
    x_rot = x[..., :rot] if rot < x.shape[-1] else x
    half = rot // 2
    rotated = torch.cat((-x_rot[..., half:], x_rot[..., :half]), dim=-1)
    out = x_rot * cos + rotated * sin
    return out if rot == x.shape[-1] else torch.cat((out, x[..., rot:]), dim=-1)


def alibi_slopes(n_heads: int) -> Tensor:
    """Press et al. 2022: geometric slopes starting at 2^(-8/n); for n not a power of two, the
    slopes of the closest smaller power of two followed by every other slope of twice that."""

    def power_of_two_slopes(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    closest = 2 ** math.floor(math.log2(n_heads))
    slopes = power_of_two_slopes(closest)
    if closest < n_heads:
        slopes += power_of_two_slopes(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(slopes)


class _CachedBias(PositionalScheme):
    """Caches the last per-distance tensor per (q_len, k_len, offset): one bias per forward."""

    def __init__(self, causal: bool):
        super().__init__()
        self.causal = causal
        self._key: tuple | None = None
        self._value: Tensor | None = None

    def _cached(self, key: tuple, make: Callable[[], Tensor]) -> Tensor:
        if key != self._key:
            self._key, self._value = key, make()
        return self._value

    @staticmethod
    def distances(q_len: int, k_len: int, offset: int, device) -> Tensor:
        """Every key − query distance of q_len queries at positions offset.. over k_len keys, once, in
        `RelativeBias` order: entry c is j − (offset + i) for any (i, j) with j − i = c − (q_len − 1)."""
        return torch.arange(q_len + k_len - 1, device=device) - (offset + q_len - 1)


class AlibiBias(_CachedBias):
    facts = POSITIONAL_FACTS["alibi"]

    def __init__(self, cfg: ArchConfig, causal: bool):
        super().__init__(causal)
        self.register_buffer("slopes", alibi_slopes(cfg.n_heads), persistent=False)

    def score_bias(self, q_len: int, k_len: int, offset: int = 0) -> RelativeBias:
        def make() -> Tensor:
            # causal: -m·(i-j) on the visible keys; bidirectional: -m·|i-j| (symmetric ALiBi)
            distance = self.distances(q_len, k_len, offset, self.slopes.device).abs().float()
            return -self.slopes[:, None] * distance

        per_distance = self._cached((q_len, k_len, offset, self.slopes.device), make)
        return RelativeBias(per_distance, q_len, k_len, slopes=self.slopes if self.causal else None)


def t5_relative_bucket(relative_position: Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> Tensor:
    """T5's bucketing of (memory - query) distances: exact below num_buckets/2 (per direction),
    logarithmic up to max_distance, saturating beyond. Causal decoders bucket only the past."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    log_ratio = torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (log_ratio * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < max_exact, distance, large)


class T5RelativeBias(_CachedBias):
    """A learned scalar per (bucket, head), computed once per forward and shared by all layers."""

    facts = POSITIONAL_FACTS["t5"]

    def __init__(self, cfg: ArchConfig, causal: bool):
        super().__init__(causal)
        self.num_buckets, self.max_distance = self._sizes = cfg.t5_num_buckets, cfg.t5_max_distance
        self.bias = nn.Embedding(cfg.t5_num_buckets, cfg.n_heads)
        # causal: the first distance of the last bucket (≤ max_distance, as buckets grow with distance), past which
        # the bias is one number per head and needs no mask (`models.far_bias`); bidirectional: not split (None)
        self.far = None
        if causal:
            last = self.num_buckets - 1
            self.far = int((t5_relative_bucket(-torch.arange(self.max_distance + 1), False, *self._sizes) < last).sum())

    def score_bias(self, q_len: int, k_len: int, offset: int = 0) -> RelativeBias:
        device = self.bias.weight.device

        def make() -> Tensor:
            distances = self.distances(q_len, k_len, offset, device)
            return t5_relative_bucket(distances, not self.causal, self.num_buckets, self.max_distance)

        buckets = self._cached((q_len, k_len, offset, device), make)
        # one bias per distance, not per (i, j): the table's gradient is summed per distance (an
        # embedding's backward over q_len·k_len indices is 10x slower at T = 1,024), and attention
        # never holds the (H, q_len, k_len) Toeplitz matrix (models/relative_bias.py)
        return RelativeBias(self.bias(buckets).T, q_len, k_len, far=self.far)


POSITIONAL: dict[PosEncoding, type[PositionalScheme]] = {
    "none": PositionalScheme,
    "sinusoidal": SinusoidalPositions,
    "learned": LearnedPositions,
    "rope": RotaryPositions,
    "alibi": AlibiBias,
    "t5": T5RelativeBias,
}
# one table of facts: each class carries the config's facts of its key
assert all(scheme.facts is POSITIONAL_FACTS[name] for name, scheme in POSITIONAL.items())


def build_positional(cfg: ArchConfig, causal: bool) -> PositionalScheme:
    scheme = POSITIONAL[cfg.pos_encoding]
    return scheme() if scheme is PositionalScheme else scheme(cfg, causal)


def register_positional(name: str, facts: PositionalFacts | None = None) -> Callable:
    """Decorator: registers a positional scheme from outside the suite (a plugin, `models.plugins`): a
    `PositionalScheme` subclass built as `(cfg, causal)` that answers the three questions (`embed`, `rotary`,
    `score_bias`; the base class's answers are "none"); `facts`: what the suite knows of it without building it
    (default: no embedding scaling, no ViT form). `name` is then a valid `model.arch.pos_encoding`. It is built
    and asked once here: a wrong interface fails at registration."""

    def register(scheme: type[PositionalScheme]) -> type[PositionalScheme]:
        what = f"pos_encoding {name!r}"
        if not (isinstance(scheme, type) and issubclass(scheme, PositionalScheme)):
            raise ConfigError(f"{what}: needs a subclass of models.positional.PositionalScheme, got {scheme!r}")
        probe_function(what, lambda x: scheme(ArchConfig(d_model=8, n_heads=1), True).embed(x), (2, 3, 8))
        register_name("pos_encoding", name, variant_owner(scheme))
        scheme.facts = POSITIONAL_FACTS[name] = facts or PositionalFacts()
        POSITIONAL[name] = scheme
        return scheme

    return register
