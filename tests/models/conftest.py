import pytest
import torch

# The tiny models here are dominated by thread overhead: on a shared CPU more threads only slow
# every test down (10x and more when other processes hold the cores).
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def max_diffs(request):
    """Largest max-abs diff per family, printed at the end of the module (pytest -s)."""
    diffs: dict[str, float] = {}
    yield diffs
    print("\ninterop max abs diffs:", ", ".join(f"{k}={v:.2e}" for k, v in sorted(diffs.items())))
