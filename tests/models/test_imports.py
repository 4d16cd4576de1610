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


def test_config_module_does_not_need_torch():
    """config.py can validate an ArchConfig with torch unavailable (loaded as a file: the package's
    __init__ imports the models, and so torch)."""
    result = _run(
        "import sys, importlib.util; sys.modules['torch'] = None; "
        "spec = importlib.util.spec_from_file_location('cfg', 'models/config.py'); "
        "cfg = importlib.util.module_from_spec(spec); sys.modules['cfg'] = cfg; spec.loader.exec_module(cfg); "
        "cfg.ArchConfig(pos_encoding='rope')\n"
        "try:\n    cfg.ArchConfig(norm='batchnorm')\nexcept ValueError as e:\n    assert 'rmsnorm' in str(e)\n"
        "else:\n    raise SystemExit('no error')"
    )
    assert result.returncode == 0, result.stderr


def test_positional_facts_do_not_need_torch():
    """The per-scheme facts the config reads (embedding scale, ViT forms) live in config.py."""
    result = _run(
        "import sys, importlib.util; sys.modules['torch'] = None; "
        "spec = importlib.util.spec_from_file_location('cfg', 'models/config.py'); "
        "cfg = importlib.util.module_from_spec(spec); sys.modules['cfg'] = cfg; spec.loader.exec_module(cfg); "
        "assert cfg.ArchConfig(d_model=64, pos_encoding='sinusoidal').embed_scale == 8.0; "
        "assert cfg.ArchConfig(d_model=64, pos_encoding='rope').embed_scale == 1.0; "
        "assert sorted(n for n, f in cfg.POSITIONAL_FACTS.items() if f.vit_form) == ['learned', 'none', 'sinusoidal']"
    )
    assert result.returncode == 0, result.stderr
