"""What the suite knows about each positional scheme without building it (torch-free, like `models.config`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

PosEncoding = Literal["sinusoidal", "learned", "rope", "alibi", "t5", "none"]


@dataclass(frozen=True)
class PositionalFacts:
    """What the suite knows about a positional scheme without building it (and without torch).

    `models/positional.py` attaches each scheme's facts to its class; the longest position a built
    scheme supports is its `max_positions` (it depends on the config).

    Args:
        scales_embeddings: by default (`scale_embeddings=None`) token embeddings are multiplied by
            sqrt(d_model), as the scheme's authors did (Vaswani et al. 2017 §3.4).
        vit_form: ViT has a form of it over its tokens (`sinusoidal` is the 2-D sin-cos table).
    """

    scales_embeddings: bool = False
    vit_form: bool = False


POSITIONAL_FACTS: dict[PosEncoding, PositionalFacts] = {
    "sinusoidal": PositionalFacts(scales_embeddings=True, vit_form=True),
    "learned": PositionalFacts(vit_form=True),
    "rope": PositionalFacts(),
    "alibi": PositionalFacts(),
    "t5": PositionalFacts(),
    "none": PositionalFacts(vit_form=True),
}
assert set(POSITIONAL_FACTS) == set(get_args(PosEncoding))
