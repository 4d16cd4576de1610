"""Activation checkpointing (`ArchConfig.activation_checkpointing`): the same gradients as the plain
stack, dropout included, fewer tensors kept by the forward, and no effect outside training."""

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models import GPT, ArchConfig, BertMLM, EncoderDecoder, ViT

TINY = dict(vocab_size=64, d_model=32, n_layers=3, n_heads=4, max_seq_len=8, init_std=0.1)
GEN = torch.Generator().manual_seed(0)
IDS = torch.randint(0, 64, (2, 8), generator=GEN)
PADDED = torch.tensor([[1] * 8, [1] * 5 + [0] * 3])  # the second row ends in padding
IMAGES = torch.randn(2, 3, 8, 8, generator=GEN)

# model -> (build from a config, loss of one batch). The encoder-decoder runs the cross-attention
# path with a padded source; BERT the padding mask; ViT its own positional scheme.
MODELS: dict[str, tuple[Callable[[ArchConfig], nn.Module], Callable[[nn.Module], Tensor]]] = {
    "gpt": (GPT, lambda m: _lm_loss(m(IDS))),
    "gpt-t5-post": (lambda cfg: GPT(_with(cfg, pos_encoding="t5", norm_placement="post")), lambda m: _lm_loss(m(IDS))),
    "gpt-rope-gqa": (lambda cfg: GPT(_with(cfg, pos_encoding="rope", n_kv_heads=2)), lambda m: _lm_loss(m(IDS))),
    "encoder-decoder": (EncoderDecoder, lambda m: _lm_loss(m(IDS, IDS.flip(1), src_attention_mask=PADDED))),
    "bert": (BertMLM, lambda m: _lm_loss(m(IDS, attention_mask=PADDED))),
    "vit": (
        lambda cfg: ViT(cfg, image_size=8, patch_size=4),
        lambda m: F.cross_entropy(m(IMAGES), torch.tensor([1, 7])),
    ),
}


def _with(cfg: ArchConfig, **fields) -> ArchConfig:
    return ArchConfig(**{**cfg.__dict__, **fields})


def _lm_loss(logits: Tensor) -> Tensor:
    targets = torch.randint(0, logits.shape[-1], logits.shape[:-1], generator=torch.Generator().manual_seed(1))
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _pair(name: str, **fields) -> tuple[nn.Module, nn.Module]:
    """The same model (same weights) built without and with activation checkpointing."""
    build, _ = MODELS[name]
    torch.manual_seed(0)
    plain = build(ArchConfig(**TINY, **fields))
    torch.manual_seed(0)
    checkpointed = build(ArchConfig(**TINY, **fields, activation_checkpointing=True))
    checkpointed.load_state_dict(plain.state_dict())
    return plain.train(), checkpointed.train()


def _loss_and_grads(name: str, model: nn.Module, seed: int = 123) -> tuple[Tensor, dict[str, Tensor]]:
    torch.manual_seed(seed)  # the same dropout draws for both models, unless checkpointing changed them
    loss = MODELS[name][1](model)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("dropout", [0.0, 0.2])
@pytest.mark.parametrize("name", list(MODELS))
def test_gradients_are_those_of_the_plain_stack(name, dropout):
    plain, checkpointed = _pair(name, dropout=dropout)
    loss, grads = _loss_and_grads(name, plain)
    loss_ckpt, grads_ckpt = _loss_and_grads(name, checkpointed)
    assert torch.equal(loss, loss_ckpt)
    for param, grad in grads.items():
        assert grad is not None and grad.abs().sum() > 0, param
        assert torch.equal(grad, grads_ckpt[param]), f"{param}: gradient differs under checkpointing"
    if dropout:  # the test can fail: another dropout draw changes the loss
        other, _ = _loss_and_grads(name, _pair(name, dropout=dropout)[0], seed=321)
        assert not torch.equal(loss, other)


def _saved_bytes(name: str, model: nn.Module) -> int:
    """Bytes of the distinct tensors the forward keeps for the backward (parameters excluded)."""
    params = {p.data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        if t.data_ptr() not in params:
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        MODELS[name][1](model)
    return sum(kept.values())


@pytest.mark.parametrize("name", ["gpt", "encoder-decoder"])
def test_the_forward_keeps_fewer_tensors(name):
    plain, checkpointed = _pair(name)
    kept, kept_ckpt = _saved_bytes(name, plain), _saved_bytes(name, checkpointed)
    # each checkpointed block keeps its input (B, T, d) only, not its q/k/v, scores, FFN hidden...
    assert kept_ckpt < 0.5 * kept, (kept_ckpt, kept)
    # ...and nothing changes in evaluation, where no backward follows
    plain.eval()
    checkpointed.eval()
    assert _saved_bytes(name, plain) == _saved_bytes(name, checkpointed)


def test_the_stack_checkpoints_each_block_only_in_training(monkeypatch):
    import models.block

    calls = []
    real = models.block.checkpoint
    monkeypatch.setattr(models.block, "checkpoint", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    _, model = _pair("gpt")
    _lm_loss(model(IDS)).backward()
    assert calls == [{"use_reentrant": False}] * TINY["n_layers"]
    calls.clear()
    with torch.no_grad():
        model(IDS)
    model.eval()
    model(IDS)
    model.train()
    model(IDS[:, :4], cache=model.stack.new_cache(8))  # a KV cache is never checkpointed
    assert calls == []


def test_generation_with_the_cache_is_unchanged():
    plain, checkpointed = _pair("gpt")
    for model in (plain, checkpointed):
        model.train()  # generate() runs under no_grad: the plain path even in training mode
    out = plain.generate(IDS[:, :2], 6, temperature=0)
    assert torch.equal(out, checkpointed.generate(IDS[:, :2], 6, temperature=0))


def test_the_flag_is_validated():
    assert ArchConfig().activation_checkpointing is False
    with pytest.raises(ValueError, match="activation_checkpointing='yes' is not valid; choose one of True, False"):
        ArchConfig(activation_checkpointing="yes")


@pytest.mark.parametrize("name", list(MODELS))
def test_drop_path_replays_under_checkpointing(name):
    """DropPath draws random numbers in the forward; the non-reentrant checkpoint stashes the RNG
    state, so the recomputed blocks drop the same samples' branches and the gradients are equal."""
    plain, checkpointed = _pair(name, drop_path=0.5)
    loss, grads = _loss_and_grads(name, plain)
    loss_ckpt, grads_ckpt = _loss_and_grads(name, checkpointed)
    assert torch.equal(loss, loss_ckpt)
    for param, grad in grads.items():
        assert torch.equal(grad, grads_ckpt[param]), f"{param}: gradient differs under checkpointing"
    # the test can fail: another seed drops other branches
    other, _ = _loss_and_grads(name, _pair(name, drop_path=0.5)[0], seed=321)
    assert not torch.equal(loss, other)
