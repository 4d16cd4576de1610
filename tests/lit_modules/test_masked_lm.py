import pytest
import torch

from lit_modules.masked_lm import MaskedLM, MaskingConfig, mask_tokens
from models.config import ArchConfig, ConfigError


def _mask(seed: int, ids: torch.Tensor, cfg=MaskingConfig()):
    return mask_tokens(
        ids,
        cfg,
        mask_id=1,
        vocab_size=50,
        special_ids=[0, 1, 2, 3],
        generators=[torch.Generator().manual_seed(seed * 1000 + i) for i in range(len(ids))],
    )


def test_bert_masking_proportions_and_specials():
    ids = torch.randint(4, 50, (64, 256))
    ids[:, :8] = 0  # padding / special tokens are never selected
    inputs, labels = _mask(0, ids)
    selected = labels != -100
    assert not selected[:, :8].any()
    rate = selected[:, 8:].float().mean().item()
    assert abs(rate - 0.15) < 0.01
    assert (labels[selected] == ids[selected]).all()  # labels are the original tokens
    masked = (inputs == 1) & selected
    kept = (inputs == ids) & selected
    assert abs(masked.sum() / selected.sum() - 0.8) < 0.03
    assert abs(kept.sum() / selected.sum() - 0.1) < 0.03 + 1 / 46  # random tokens can hit the original
    assert (inputs[~selected] == ids[~selected]).all()


def test_masking_is_seeded():
    ids = torch.randint(4, 50, (4, 64))
    a, b, c = _mask(1, ids), _mask(1, ids), _mask(2, ids)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])


def test_an_examples_masks_do_not_depend_on_its_batch():
    """Masks are drawn per example (keyed by its sample index), so they are the same whichever batch,
    or whichever of N processes, the example lands in."""
    ids = torch.randint(4, 50, (4, 64))

    def masks(rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        generators = [torch.Generator().manual_seed(1000 + i) for i in rows]
        return mask_tokens(ids[rows], MaskingConfig(), 1, 50, [0, 1, 2, 3], generators)

    together = masks([0, 1, 2, 3])
    apart = [masks([0, 1]), masks([2, 3])]
    for k in range(2):
        assert torch.equal(together[k], torch.cat([apart[0][k], apart[1][k]]))


def test_test_stage_logs_the_test_split(tmp_path):
    """`cli.py test` evaluates a masked LM on the data's test split as test/loss and test/acc."""
    from lit_modules.suite_cli import cli_main

    args = ["-c", "configs/bert/base.yaml", "-c", "configs/bert/tiny.yaml", "--data.test_split=held_out",
            "--data.val_tokens=2048", "--trainer.limit_test_batches=2", "--trainer.limit_val_batches=2",
            f"--trainer.default_root_dir={tmp_path}", "--trainer.logger=false", "--seed_everything=0"]  # fmt: skip
    test = cli_main(["test", *args]).trainer.callback_metrics
    validate = cli_main(["validate", *args]).trainer.callback_metrics
    assert {"test/loss", "test/acc"} <= test.keys() and not any(k.startswith("val/") for k in test)
    assert test["test/loss"] != validate["val/loss"]  # other tokens, the same untrained model


def test_a_tokenizer_without_a_mask_token_is_refused_by_the_masked_lm():
    """A user's own `tokenizers` file without <mask> (GPT-2's) gives no mask id: the masked LM says so."""
    arch = ArchConfig(vocab_size=50, d_model=16, n_layers=1, n_heads=2, max_seq_len=16)
    with pytest.raises(ConfigError, match="the tokenizer has no mask token"):
        MaskedLM(arch=arch, data_info={"vocab_size": 50, "mask_token_id": None})
