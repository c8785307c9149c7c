import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
os.environ.setdefault("ENKAI_TENSOR_PATH", str(ROOT / "target" / "release" / "libenkai_tensor.so"))

import pytest


@pytest.fixture(params=["torch", "cpu"])
def backend(request):
    """Runs a test once per backend: libtorch, then the native Rust one."""
    import enkai_tensor as et

    before = et.backend_current()
    et.backend_set(request.param)
    try:
        yield request.param
    finally:
        et.backend_set(before)
