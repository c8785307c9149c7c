import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
os.environ.setdefault("ENKAI_TENSOR_PATH", str(ROOT / "target" / "release" / "libenkai_tensor.so"))

import pytest


@pytest.fixture(params=["torch", "cpu"])
def backend(request):
    """Runs a test once per backend: libtorch, then the native Rust one (test
    IDs start with the backend, e.g. `test_binary[cpu-add-...]`). Opt-in per
    module (`pytestmark = pytest.mark.usefixtures("backend")`) or per test:
    suites that need libtorch-only features (checkpoints, dist, amp, LM) do
    not use it and run on the default backend."""
    import enkai_tensor as et

    if request.param not in et.backend_list():
        pytest.skip(f"the {request.param} backend is not built into this library")
    before = et.backend_current()
    et.backend_set(request.param)
    try:
        yield request.param
    finally:
        et.backend_set(before)
