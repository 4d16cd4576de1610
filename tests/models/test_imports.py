"""`import models` stays free of Lightning; the config module is free of torch."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_models_does_not_import_lightning():
    result = _run(
        "import models, sys; "
        "bad = sorted(m for m in sys.modules if m.startswith(('lightning', 'pytorch_lightning'))); "
        "assert not bad, bad; "
        "from models import GPT, BertMLM, EncoderDecoder, ViT, ArchConfig, default_d_ff"
    )
    assert result.returncode == 0, result.stderr


# models.config and the modules it imports (the parametrization table, the positional facts) with torch unavailable,
# under a bare `models` package: the package's __init__ imports the models, and so torch
TORCHLESS_CONFIG = (
    "import sys, types, importlib; sys.modules['torch'] = None; pkg = types.ModuleType('models'); "
    "pkg.__path__ = ['models']; sys.modules['models'] = pkg; cfg = importlib.import_module('models.config')"
)


def test_config_module_does_not_need_torch():
    """config.py can validate an ArchConfig with torch unavailable."""
    result = _run(
        f"{TORCHLESS_CONFIG}; "
        "cfg.ArchConfig(pos_encoding='rope'); "
        "assert cfg.ArchConfig(d_model=64, parametrization='mup', base_width=32).width_mult == 2.0\n"
        "try:\n    cfg.ArchConfig(norm='batchnorm')\nexcept ValueError as e:\n    assert 'rmsnorm' in str(e)\n"
        "else:\n    raise SystemExit('no error')"
    )
    assert result.returncode == 0, result.stderr


def test_positional_facts_do_not_need_torch():
    """The per-scheme facts the config reads (embedding scale, ViT forms) live in config.py."""
    result = _run(
        f"{TORCHLESS_CONFIG}; "
        "assert cfg.ArchConfig(d_model=64, pos_encoding='sinusoidal').embed_scale == 8.0; "
        "assert cfg.ArchConfig(d_model=64, pos_encoding='rope').embed_scale == 1.0; "
        "assert sorted(n for n, f in cfg.POSITIONAL_FACTS.items() if f.vit_form) == ['learned', 'none', 'sinusoidal']"
    )
    assert result.returncode == 0, result.stderr
