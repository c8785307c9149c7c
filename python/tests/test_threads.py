"""enkai_set_num_threads / ENKAI_NUM_THREADS drive libtorch's intra-op pool:
torch.get_num_threads() in the same process is the oracle."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import enkai_tensor as et

ROOT = Path(__file__).resolve().parents[2]


def test_set_num_threads_is_torchs():
    before = torch.get_num_threads()
    try:
        for n in (1, 2, 3):
            et.set_num_threads(n)
            assert torch.get_num_threads() == n and et.get_num_threads() == n
        torch.set_num_threads(2)
        assert et.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("n", [0, -1, 1025, 2**40])
def test_counts_outside_1_to_1024_are_refused(n):
    before = et.get_num_threads()
    with pytest.raises(et.EnkaiError) as e:
        et.set_num_threads(n)
    assert e.value.code == "E_INVALID_ARG" and "outside 1..=1024" in str(e.value)
    assert et.get_num_threads() == before


def _child(code, value):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "ENKAI_NUM_THREADS": value}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


def test_the_environment_sets_the_count_before_the_first_device():
    code = "import torch, enkai_tensor as et; et.zeros([2]); print(torch.get_num_threads(), et.get_num_threads())"
    p = _child(code, "1")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["1", "1"]
    # A call made before the first device wins over the environment.
    p = _child("import torch, enkai_tensor as et; et.set_num_threads(2); et.zeros([2]); print(torch.get_num_threads())",
               "1")
    assert p.returncode == 0 and p.stdout.split() == ["2"], p.stderr


def test_a_bad_environment_value_is_a_named_error():
    p = _child("import enkai_tensor as et\ntry:\n    et.zeros([2])\nexcept et.EnkaiError as e:\n    print(e)", "lots")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith('E_INVALID_ARG: ENKAI_NUM_THREADS="lots" is not a thread count'), p.stdout
