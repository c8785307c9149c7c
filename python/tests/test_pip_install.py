"""`pip install ./python` gives a package that carries its library and finds
it with no environment variable, from any directory."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pip_install_bundles_the_library(tmp_path):
    target = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if k not in ("ENKAI_TENSOR_PATH", "PYTHONPATH", "LD_LIBRARY_PATH")}
    # --no-build-isolation: the venv's setuptools builds it, with no download.
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                        "--target", str(target), str(ROOT / "python")], capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    pkg = target / "enkai_tensor"
    assert (pkg / "libenkai_tensor.so").is_file() and (pkg / "py.typed").is_file()
    code = ("import enkai_tensor as et; t = et.tensor([[1.0, 2.0]]) @ et.ones([2, 1]); "
            "print(et._lib.lib._name); print(t.tolist())")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**env, "PYTHONPATH": str(target)})
    assert p.returncode == 0, p.stderr
    lib_path, value = p.stdout.splitlines()
    assert Path(lib_path) == pkg / "libenkai_tensor.so"
    assert value == "[[3.0]]"
    assert not (ROOT / "python" / "build").exists() or "build" in (ROOT / ".gitignore").read_text()
