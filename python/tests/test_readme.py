"""Every ```python block of README.md runs as written (with the package
importable, as after `pip install ./python`), so the docs cannot rot."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"^```python[ \t]*\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)


def test_the_readme_has_python_examples():
    assert BLOCKS, "README has no python examples"


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_python_block_runs(code, tmp_path):
    # A scratch directory, so that a block cannot write into the repository;
    # `target` links to the repository's, for blocks that open the library by
    # its path from the repository root (as the README's raw ctypes one does).
    (tmp_path / "target").symlink_to(ROOT / "target", target_is_directory=True)
    # The package as conftest.py makes it importable (its ENKAI_TENSOR_PATH is inherited).
    path = [str(ROOT / "python")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env=env)
    assert p.returncode == 0, f"README block failed:\n{code}\n--- stdout:\n{p.stdout}\n--- stderr:\n{p.stderr}"
