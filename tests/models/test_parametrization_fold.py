"""`models.parametrization_fold.to_standard`: a µP or CompleteP model and its `sp` fold compute the same logits
within 1e-5, weights perturbed off their init, for every family, norm placement and norm, with and without QK-norm,
tied and untied; and each of the four folds is needed (without any one of them the same check fails)."""

from __future__ import annotations

from dataclasses import replace
from itertools import product

import pytest
import torch

from models import GPT, ArchConfig, BertMLM, EncoderDecoder, ViT
from models import parametrization_fold as fold_module
from models.block import PLACEMENTS
from models.parametrization_fold import plan, to_standard

TOL = 1e-5
VOCAB = 61
# m_N = 48 / 16 = 3; under completep m_L = 3 / 1 (the encoder-decoder's decoder: 2 / 1): no multiplier is 1
SHAPE = dict(vocab_size=VOCAB, d_model=48, n_layers=3, n_heads=4, max_seq_len=24, base_width=16)
FAMILIES = {
    "gpt": GPT,
    "bert": BertMLM,
    "enc-dec": lambda cfg: EncoderDecoder(replace(cfg, n_decoder_layers=2)),
    "vit": lambda cfg: ViT(cfg, image_size=8, patch_size=4, in_channels=3, num_classes=7),
}


def _model(family: str, parametrization: str, **arch) -> torch.nn.Module:
    """A `family` model under `parametrization`, every parameter moved off its init (norm gains off 1, biases off
    0), so that no fold is checked at a special point."""
    depth = dict(base_depth=1) if parametrization == "completep" else {}
    torch.manual_seed(0)
    model = FAMILIES[family](ArchConfig(**(SHAPE | dict(parametrization=parametrization, **depth) | arch)))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def _logits(model: torch.nn.Module) -> torch.Tensor:
    ids = torch.randint(0, VOCAB, (3, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        if isinstance(model, ViT):
            return model(torch.randn(3, 3, 8, 8, generator=torch.Generator().manual_seed(1)))
        if isinstance(model, BertMLM):
            mask = torch.ones_like(ids)
            mask[1, -5:] = 0
            return model(ids, attention_mask=mask)[mask.bool()]
        if isinstance(model, EncoderDecoder):
            return model(ids, ids[:, :11].flip(-1))
        return model(ids)


def _max_diff(model: torch.nn.Module, folded: torch.nn.Module) -> float:
    return (_logits(model) - _logits(folded)).abs().max().item()


# qk_norm and tied: every pair for GPT, two for the others (ViT has no token table to tie)
PAIRS = {"gpt": list(product(("none", "rmsnorm"), (True, False))), "vit": [("none", False), ("layernorm", False)]}
CASES = [
    (family, parametrization, placement, qk_norm, tied)
    for family in FAMILIES
    for parametrization in ("mup", "completep")
    for placement in PLACEMENTS
    for qk_norm, tied in PAIRS.get(family, [("none", True), ("layernorm", False)])
]


@pytest.mark.parametrize(
    "family, parametrization, placement, qk_norm, tied", CASES, ids=["-".join(map(str, c)) for c in CASES]
)
def test_the_folded_model_computes_the_same_logits(family, parametrization, placement, qk_norm, tied):
    embeddings = {} if family == "vit" else dict(scale_embeddings=True, tie_embeddings=tied)  # √base_width
    model = _model(family, parametrization, norm_placement=placement, qk_norm=qk_norm, **embeddings)
    folded = to_standard(model)
    assert type(folded) is type(model) and not folded.training
    assert (folded.cfg.parametrization, folded.cfg.base_width, folded.cfg.base_depth) == ("sp", None, None)
    if family != "vit":  # the readout multiplier unties a tied head
        assert folded.cfg.tie_embeddings is False and folded.lm_head.weight is not folded.tok.weight
    assert _max_diff(model, folded) < TOL


VARIANTS = {
    # the norms' affine maps (RMSNorm: a gain only; DyT: γ and β, α kept, a learned embedding gain kept as it is)
    "rmsnorm-nobias-rope-gqa-qknorm_per_head": dict(
        norm="rmsnorm", bias=False, pos_encoding="rope", n_kv_heads=2, qk_norm="rmsnorm", qk_norm_scope="head"
    ),
    "dyt-learned-gain": dict(norm="dyt"),
    "dyt-nobias-qknorm": dict(norm="dyt", bias=False, qk_norm="layernorm"),
    # scores capped after their scale; biased per distance (applied per block of queries, or by SDPA's mask)
    "softcaps-swiglu": dict(attn_softcap=2.0, logit_softcap=3.0, activation="swiglu"),
    "t5-bias-blockwise": dict(pos_encoding="t5", t5_num_buckets=8, t5_max_distance=20),
    "alibi-math": dict(pos_encoding="alibi", bias_backward="math"),
    "sinusoidal-scaled-tied": dict(pos_encoding="sinusoidal"),
    "explicit-attn_scale": dict(attn_scale=0.3),
    "dropout-drop_path-in-eval": dict(dropout=0.1, drop_path=0.1, embedding_norm=True),
}


@pytest.mark.parametrize("placement", ["pre", "peri", "reordered"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_fold_of_every_norm_and_attention_variant(variant, placement):
    model = _model("gpt", "completep", norm_placement=placement, **VARIANTS[variant])
    folded = to_standard(model)
    assert _max_diff(model, folded) < TOL
    assert folded.cfg.attn_scale == model.cfg.attn_scale  # an explicit scale is the same in both: kept


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("removed", ["readout", "table", "attention", "residual"])
def test_each_fold_is_needed(removed, family, monkeypatch):
    """Without any one fold, the check above fails by far more than its tolerance: each of them is tested."""
    if family == "vit" and removed == "table":
        pytest.skip("a ViT has no token table")
    model = _model(family, "completep", scale_embeddings=True, qk_norm="rmsnorm" if family == "gpt" else "none")
    if removed in ("readout", "table"):
        monkeypatch.setattr(fold_module, "plan", lambda m: replace(plan(m), **{removed: 1.0}))
    else:
        monkeypatch.setattr(fold_module, f"_fold_{removed}", lambda *args: None)
    assert _max_diff(model, to_standard(model)) > 100 * TOL


def test_at_width_one_a_tied_head_stays_tied():
    """CompleteP at its base width (m_N = 1): only the residual branches fold, and the head stays the table."""
    model = _model("gpt", "completep", tie_embeddings=True, scale_embeddings=True, base_width=None)
    folded = to_standard(model)
    fold = plan(model)
    assert (fold.readout, fold.table, fold.reasons) == (1.0, 1.0, {})
    assert folded.cfg.tie_embeddings and folded.lm_head.weight is folded.tok.weight
    assert _max_diff(model, folded) < TOL


def test_why_the_head_is_untied_is_said():
    reasons = plan(_model("gpt", "mup", tie_embeddings=True)).reasons
    assert reasons == {
        "tie_embeddings": "parametrization='mup' multiplies the readout's input by 1/m_N = 0.333333, folded into "
        "an lm_head untied from the token embedding"
    }
    assert plan(_model("vit", "mup")).reasons == {}  # no table: nothing to untie


def test_an_sp_model_is_its_own_fold_and_dtype_and_mode_are_kept():
    sp = GPT(ArchConfig(**dict(SHAPE, base_width=None)))
    assert to_standard(sp) is sp
    model = _model("gpt", "mup").double().train()
    folded = to_standard(model)
    assert folded.training and next(folded.parameters()).dtype == torch.float64
    assert _max_diff(model.eval(), folded.eval()) < 1e-12


def test_the_source_model_is_left_as_it_is():
    model = _model("gpt", "completep", scale_embeddings=True)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    to_standard(model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.lm_head.weight is model.tok.weight
