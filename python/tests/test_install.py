"""`pip install ./python` gives a package that carries its library and finds
it with no environment variable, from any directory; the build takes the
library from ../target/release (or ENKAI_TENSOR_PATH) and fails clearly
when it is not built."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "target" / "release" / "libenkai_tensor.so"
# No variable that could lead the installed package to a library outside it.
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("ENKAI_TENSOR_PATH", "PYTHONPATH", "LD_LIBRARY_PATH")}


def pip_install(src, target, env):
    # --no-build-isolation: the venv's own setuptools builds it, with no download.
    return subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                           "--target", str(target), str(src)], capture_output=True, text=True, timeout=600, env=env)


def test_the_venv_can_build_without_network():
    p = subprocess.run([sys.executable, "-c", "import setuptools"], capture_output=True, text=True)
    assert p.returncode == 0, "the test venv needs setuptools for `pip install --no-build-isolation ./python`"


def test_pip_install_bundles_the_library(tmp_path):
    target = tmp_path / "site"
    p = pip_install(ROOT / "python", target, CLEAN_ENV)
    assert p.returncode == 0, p.stdout + p.stderr
    pkg = target / "enkai_tensor"
    assert (pkg / "libenkai_tensor.so").is_file() and (pkg / "py.typed").is_file()
    code = ("import enkai_tensor as et; print(et._lib.lib._name); print(et.ones([2]).numpy()); "
            "print((et.tensor([[1.0, 2.0]]) @ et.ones([2, 1])).tolist())")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**CLEAN_ENV, "PYTHONPATH": str(target)})
    assert p.returncode == 0, p.stderr
    lib_path, ones, value = p.stdout.splitlines()
    assert Path(lib_path) == pkg / "libenkai_tensor.so"  # the copy inside the package, not target/release
    assert ones == "[1. 1.]" and value == "[[3.0]]"
    # the in-tree build outputs are ignored by git, never committed
    for out in ["python/build", "python/enkai_tensor.egg-info"]:
        if (ROOT / out).exists():
            assert subprocess.run(["git", "check-ignore", "-q", out], cwd=ROOT).returncode == 0, out


def test_the_build_takes_the_library_from_enkai_tensor_path(tmp_path):
    # A copy of python/ with no ../target beside it: only the variable can name the library.
    src = tmp_path / "python"
    shutil.copytree(ROOT / "python", src, ignore=shutil.ignore_patterns("build", "*.egg-info", "tests", "__pycache__",
                                                                         ".pytest_cache", "*.so"))
    target = tmp_path / "site"
    p = pip_install(src, target, {**CLEAN_ENV, "ENKAI_TENSOR_PATH": str(LIB)})
    assert p.returncode == 0, p.stdout + p.stderr
    assert (target / "enkai_tensor" / "libenkai_tensor.so").read_bytes() == LIB.read_bytes()


def test_the_build_fails_clearly_when_the_library_is_not_built(tmp_path):
    src = tmp_path / "python"
    shutil.copytree(ROOT / "python", src, ignore=shutil.ignore_patterns("build", "*.egg-info", "tests", "__pycache__",
                                                                         ".pytest_cache", "*.so"))
    p = pip_install(src, tmp_path / "site", CLEAN_ENV)
    assert p.returncode != 0
    assert "is not built; run `make build`" in p.stdout + p.stderr, p.stdout + p.stderr
    assert not (tmp_path / "site" / "enkai_tensor").exists()
