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
