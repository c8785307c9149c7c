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
    suites that need libtorch-only features (dist) do not use it and run on
    the default backend. ENKAI_BACKEND is set too for the test's duration, so
    the processes a test starts create their tensors on the same backend."""
    import enkai_tensor as et

    if request.param not in et.backend_list():
        pytest.skip(f"the {request.param} backend is not built into this library")
    before, env = et.backend_current(), os.environ.get("ENKAI_BACKEND")
    et.backend_set(request.param)
    os.environ["ENKAI_BACKEND"] = request.param
    try:
        yield request.param
    finally:
        et.backend_set(before)
        if env is None:
            os.environ.pop("ENKAI_BACKEND", None)
        else:
            os.environ["ENKAI_BACKEND"] = env
