"""The Python package behaves like torch where the ABI allows: construction
from data, repr, indexing (values and gradients), operators with Python
scalars, numpy interop. torch is the oracle for each."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import enkai_tensor as et
from enkai_tensor import _format
from helpers import DT, TORCH, same, to_et

ROOT = Path(__file__).resolve().parents[2]

# ---------- construction: torch.tensor's dtype inference ----------

DATA = [1.5, 2, [1, 2, 3], [[1.0, 2.0], [3.0, 4.5]], [True, False], True, [[1, 2], [3, 4]], [], [[]], 0.1,
        [True, 2], [1, 2.5], [True, 0.5], (1, 2), [(1.0, 2.0), (3.0, 4.0)], [1e300, -1e-50, 1e-46], [2 ** 62 + 1, -5],
        [np.float64(1.5), 2.0], [np.int32(3), np.int32(4)], [np.int32(3), 2], [np.float16(1.5), 2],
        [np.uint8(7), np.int32(-1)], [np.bool_(True), False], np.float32(0.1), np.int64(-3)]


@pytest.mark.parametrize("data", DATA, ids=[repr(d) for d in DATA])
def test_tensor_from_python_data_infers_dtypes_as_torch(data):
    ref = torch.tensor(data)
    same(et.tensor(data), ref)
    same(et.Tensor(data), ref)


@pytest.mark.parametrize("np_dtype", ["float32", "float64", "float16", "int64", "int32", "uint8", "bool"])
def test_tensor_from_numpy_keeps_the_dtype(np_dtype):
    a = (np.arange(12).reshape(3, 4) % 3).astype(np_dtype)
    same(et.Tensor(a), torch.tensor(a))
    same(et.tensor(a[:, ::2]), torch.tensor(a[:, ::2]))  # non-contiguous input
    assert np.array_equal(np.asarray(et.tensor(a)), a)
    assert np.asarray(et.tensor(a), dtype=np.float64).dtype == np.float64


@pytest.mark.parametrize("dtype", ["fp32", "fp64", "fp16", "bf16", "int64", "int32", "uint8", "bool"])
@pytest.mark.parametrize("data", [[0.1, 1 / 3, 2.7, 1e-5], [[1, 0], [200, 7]], [True, False], 1 / 3, 5],
                         ids=["floats", "ints", "bools", "float", "int"])
def test_explicit_dtype_converts_once_as_torch(data, dtype):
    # the Python values reach the dtype in one conversion: fp64 0.1 is the double 0.1, not a widened float
    ref = torch.tensor(data, dtype=TORCH[dtype])
    same(et.tensor(data, dtype=dtype), ref)
    same(et.Tensor(data, dtype), ref)


def test_an_int_is_data_and_handles_go_through_from_handle():
    same(et.Tensor(5), torch.tensor(5))  # torch.tensor(5): a 0-dim int64 tensor, never a handle
    x = et.tensor([1.0, 2.0])
    y = et.Tensor._from_handle(et.lib.enkai_tensor_relu(x.handle))
    same(y, torch.tensor([1.0, 2.0]))
    before = et.live()["tensors"]
    z = et.Tensor.borrow(x.handle)  # a second reference: both free on their own
    assert et.live()["tensors"] == before and z.handle == x.handle
    del z
    same(x, torch.tensor([1.0, 2.0]))
    with pytest.raises(et.EnkaiError):
        et.Tensor._from_handle(0)
    with pytest.raises(TypeError):
        et.Tensor(x)


def test_numpy_interop():
    bf = et.tensor([0.5, 1.5], dtype="bf16")
    a = bf.numpy()  # numpy has no bf16: a float32 copy
    assert a.dtype == np.float32 and a.tolist() == [0.5, 1.5]
    e = et.tensor([[1, 2], [3, 4]], dtype="int32")
    assert np.asarray(e).dtype == np.int32 and np.array(e).tolist() == [[1, 2], [3, 4]]
    assert np.asarray(e, dtype=np.float32).dtype == np.float32
    with pytest.raises(ValueError):  # numpy 2's protocol: no silent copy when copy=False is asked
        np.asarray(e, copy=False)
    b = e.numpy()
    b[0, 0] = 9  # a copy: the tensor is unchanged
    assert e.tolist() == [[1, 2], [3, 4]]
    same(et.from_numpy(np.arange(6.0).reshape(2, 3)), torch.from_numpy(np.arange(6.0).reshape(2, 3)))


def test_explicit_dtype_and_the_errors_for_bad_data():
    same(et.tensor([1, 2], dtype="bf16"), torch.tensor([1, 2], dtype=torch.bfloat16))
    same(et.tensor([0.1, 0.7], dtype="fp16"), torch.tensor([0.1, 0.7], dtype=torch.float16))
    with pytest.raises(ValueError):
        et.tensor([[1, 2], [3]])
    with pytest.raises(TypeError):
        et.tensor(np.zeros(2, dtype=np.uint16))
    # complex numbers are complex64, as torch.tensor makes them (test_complex.py has the rest)
    assert et.tensor([1j, 2]).dtype == "complex64" and et.tensor([1j, 2]).tolist() == torch.tensor([1j, 2]).tolist()
    for bad in (["a"], [None], [object()]):  # no str or object tensors
        with pytest.raises(TypeError):
            et.tensor(bad)
    with pytest.raises(OverflowError):
        et.tensor([2 ** 64])


VALUES = [-1, -255, -256, 255, 256, 2 ** 31 - 1, 2 ** 31, -2 ** 31 - 1, 2 ** 63 - 1, -2.7, -0.5, 255.9, 256.0, 1e300,
          65504.0, 65520.0, 3.5e38, float("inf"), float("nan"), True]


@pytest.mark.parametrize("dtype", ["uint8", "int32", "int64", "fp16", "bf16", "fp32", "bool"])
def test_values_out_of_a_dtypes_range_fail_or_convert_as_torch(dtype):
    for v in VALUES:
        try:
            ref = torch.tensor([v], dtype=TORCH[dtype])
        except RuntimeError:  # torch: "value cannot be converted to type uint8 without overflow"
            with pytest.raises(OverflowError):
                et.tensor([v], dtype=dtype)
            continue
        same(et.tensor([v], dtype=dtype), ref)


# ---------- repr: torch's values, plus dtype and device ----------

def _values_of_torch(x):
    return torch._tensor_str._tensor_str(x, len("tensor("))


REPR_CASES = [
    torch.tensor(3.25), torch.tensor(7), torch.tensor(True), torch.zeros(0), torch.zeros(2, 0, 3),
    torch.arange(5.0), torch.arange(5) - 2, torch.tensor([True, False]), torch.tensor([1e-5, 2.0, 3e5]),
    torch.tensor([1.0, 100.0, 1e9]), torch.tensor([0.1, float("inf"), float("nan"), -2.0]),
    torch.tensor([1.0, float("inf")]), torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),
    torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1)) * 1000,
    torch.randn(40, 50, generator=torch.Generator().manual_seed(2)), torch.arange(1001),
    torch.arange(2000.0).reshape(10, 20, 10), torch.randn(30, generator=torch.Generator().manual_seed(3)),
    torch.randint(-1000, 1000, (7, 300), generator=torch.Generator().manual_seed(4)),
    torch.arange(12, dtype=torch.uint8).reshape(3, 4), torch.tensor([0.5, 1.5], dtype=torch.bfloat16),
    torch.tensor([65504.0, 1e-3], dtype=torch.float16), torch.arange(6, dtype=torch.int32),
    # more: 3-d over 1000 cut in every dim, bools/ints over 1000, magnitudes, signs, zeros, NaNs, wrapping
    torch.randn(8, 9, 20, generator=torch.Generator().manual_seed(5)), torch.arange(1500) % 3 == 0,
    torch.arange(-3000, 3000, 3).reshape(50, 40), torch.tensor([1e10, 2e10]), torch.tensor([1e-6, 2e-6, -3e-6]),
    torch.tensor([[-0.0, 0.0], [1.0, -1.0]]), torch.zeros(3, 2), torch.full((2, 2), float("nan")),
    torch.tensor([float("-inf"), 1.0, 2.0]), torch.tensor([123456789.0, 1.0]), torch.tensor([1e8, 1e9], dtype=torch.float64),
    torch.tensor([0.1, 1e-5], dtype=torch.float64), torch.randn(6, 17, generator=torch.Generator().manual_seed(6)) * 1e5,
    torch.arange(100.0) / 7, torch.tensor(-1e-7), torch.tensor(float("nan")), torch.ones(1, 1, 1, 1), torch.zeros(0, 4),
    torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(8)), torch.tensor([[[True]]]),
    torch.randn(1001, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16), torch.arange(7, 1008),
    torch.tensor([255, 0, 7], dtype=torch.uint8), torch.tensor([2 ** 62, -(2 ** 62)]),
]


@pytest.mark.parametrize("ref", REPR_CASES, ids=range(len(REPR_CASES)))
def test_repr_prints_values_as_torch_does(ref):
    e = to_et(ref)
    want_values = _values_of_torch(ref)
    got = repr(e)
    assert got.startswith("tensor(" + want_values), f"\n{got}\nvs torch\n{ref!r}"
    # suffixes wrap onto their own line past 80 columns, as torch's do
    assert " ".join(got.split()).endswith(f"dtype={DT[ref.dtype]}, device=cpu)"), got
    assert str(e) == got


def test_repr_formats_exactly_with_our_dtype_and_device():
    assert repr(et.tensor([[0.1, 0.2]])) == "tensor([[0.1000, 0.2000]], dtype=fp32, device=cpu)"
    assert repr(et.tensor(5)) == "tensor(5, dtype=int64, device=cpu)"
    assert repr(et.zeros([2, 0])) == "tensor([], size=(2, 0), dtype=fp32, device=cpu)"
    assert repr(et.zeros([0])) == "tensor([], dtype=fp32, device=cpu)"
    # the values are torch's: the same text once torch's own suffix is swapped for ours
    ref = torch.arange(30.0).reshape(3, 10) / 3
    assert repr(to_et(ref)) == repr(ref)[:-1] + ", dtype=fp32, device=cpu)"


def test_repr_needs_no_numpy(tmp_path):
    code = ("import sys; sys.modules['numpy'] = None\n"
            "import enkai_tensor as et\n"
            "t = et.tensor([[1.5, 2.0], [3.0, 4.0]])\n"
            "print(repr(t)); print(str(et.zeros([40, 40]))); print(et.tensor([True]), (t * 2).tolist())\n"
            "try:\n    t.numpy()\nexcept ImportError:\n    print('no numpy')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python")}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "tensor([[1.5000, 2.0000],"
    assert lines[1] == "        [3.0000, 4.0000]], dtype=fp32, device=cpu)"
    assert "\n".join(lines[2:9]) + "\n" == str(torch.zeros(40, 40)).replace(")", ", dtype=fp32, device=cpu)\n")
    assert lines[-2:] == ["tensor([True], dtype=bool, device=cpu) [[3.0, 4.0], [6.0, 8.0]]", "no numpy"]


def test_repr_reads_only_the_corners_of_a_large_tensor():
    e = et.zeros([2000, 2000])
    assert _values_of_torch(torch.zeros(2000, 2000)) in repr(e)
    assert _format.THRESHOLD == 1000 and _format.EDGEITEMS == 3  # torch's defaults


# ---------- indexing through slice ----------

INDEXES = [0, -1, slice(1, 3), slice(None, None, 2), (slice(None), 1), (Ellipsis, -1), (1, slice(2, None)),
           (slice(None), slice(None, None, 3), 0), Ellipsis, slice(5, 100), slice(-3, None), slice(3, 1),
           (0, 0, 0), (Ellipsis, slice(1, 2), 2), (slice(None), -1), slice(-3, -1), (Ellipsis, slice(1, None)),
           (slice(None, -1, 2), Ellipsis, slice(-100, 100, 4)), (-4, slice(None), -6)]


@pytest.mark.parametrize("index", INDEXES, ids=[repr(i) for i in INDEXES])
def test_indexing_matches_torch_with_gradients(index):
    ref = torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(7), requires_grad=True)
    e = to_et(ref.detach()).require_grad()
    got, want = e[index], ref[index]
    same(got, want)
    (got * got).sum().backward()
    (want * want).sum().backward()
    same(e.grad, ref.grad)


def test_bad_indexes_fail_like_torch():
    e, ref = et.zeros([3, 4]), torch.zeros(3, 4)
    for index, exc in [(3, IndexError), ((0, 0, 0), IndexError), (slice(None, None, -1), ValueError),
                       (1.5, IndexError)]:
        with pytest.raises(exc):
            e[index]
        with pytest.raises(exc):
            ref[index]
    with pytest.raises(IndexError):
        e[..., ...]  # as numpy (torch lets it pass)
    for index in (None, True, [0, 1], (0, None)):  # torch's new dims and advanced indexing are not supported
        with pytest.raises(IndexError):
            e[index]
    same(e[np.int64(1), -2:], ref[np.int64(1), -2:])
    assert len(e) == 3 and [r.shape for r in e] == [(4,)] * 3
    with pytest.raises(TypeError):
        len(et.tensor(1.0))


# ---------- operators with Python scalars: torch's result dtypes and values ----------

# (numpy bools are left out: torch takes np.True_ as the float 1.0, where we take it as True)
SCALARS = [2, 2.5, True, -3, 0.1, 1 / 3, -7.3, 257, 2 ** 40 + 1, np.float32(0.1), np.int64(3)]
OPS = {"add": lambda a, b: a + b, "radd": lambda a, b: b + a, "sub": lambda a, b: a - b,
       "rsub": lambda a, b: b - a, "mul": lambda a, b: a * b, "rmul": lambda a, b: b * a,
       "div": lambda a, b: a / b, "rdiv": lambda a, b: b / a}


@pytest.mark.parametrize("shape", [(2, 3), ()], ids=["2x3", "0dim"])
@pytest.mark.parametrize("dtype", ["fp32", "fp64", "fp16", "bf16", "int64", "int32", "bool"])
@pytest.mark.parametrize("scalar", SCALARS, ids=repr)
@pytest.mark.parametrize("op", OPS)
def test_scalar_operators_promote_as_torch(op, scalar, dtype, shape):
    ref = (torch.arange(1, 7).reshape(2, 3) % 4 + 1).to(TORCH[dtype])
    ref = ref[1, 2] if shape == () else ref
    f = OPS[op]
    try:
        want = f(ref, scalar)
    except RuntimeError:  # torch refuses `-` with a bool, and a bool tensor minus anything
        with pytest.raises((et.EnkaiError, TypeError)):
            f(to_et(ref), scalar)
        return
    same(f(to_et(ref), scalar), want)  # bit for bit: the same kernels with the number as torch wraps it


def test_scalar_operators_keep_gradients():
    ref = torch.tensor([[1.0, -2.0], [3.5, 0.25]], requires_grad=True)
    e = to_et(ref.detach()).require_grad()
    (((2 - e) * 3 + e / 4 - 1.5 / e) * (-e)).sum().backward()
    (((2 - ref) * 3 + ref / 4 - 1.5 / ref) * (-ref)).sum().backward()
    same(e.grad, ref.grad)


def test_comparisons_are_identity_or_refused():
    a, b = et.tensor([1.0]), et.tensor([1.0])
    assert a == a and a != b and not (a == b) and len({a, b, a}) == 2
    for cmp in (lambda: a < b, lambda: a <= b, lambda: a > b, lambda: a >= b, lambda: a < 1):
        with pytest.raises(TypeError):
            cmp()


def test_unary_operators():
    ref = torch.tensor([[1.0, -2.0], [3.5, 0.0]])
    e = to_et(ref)
    same(-e, -ref)
    same(+e, +ref)
    same(-to_et(torch.tensor([1, -2])), -torch.tensor([1, -2]))
    with pytest.raises(TypeError):
        -et.tensor([True])
    assert float(et.tensor([2.5])) == 2.5 and int(et.tensor(3)) == 3 and bool(et.tensor(1.0))
    with pytest.raises(RuntimeError):
        bool(et.tensor([1.0, 2.0]))
    with pytest.raises(TypeError):
        e < e
    a, b = et.tensor([[1.0, 2.0]]), et.tensor([[3.0], [4.0]])
    same(a @ b, torch.tensor([[1.0, 2.0]]) @ torch.tensor([[3.0], [4.0]]))


def test_device_dtype_ndim_and_tolist():
    e = et.tensor([[1, 2], [3, 4]])
    assert (e.device, e.dtype, e.ndim, e.shape) == ("cpu", "int64", 2, (2, 2))
    assert e.tolist() == [[1, 2], [3, 4]]
    assert et.tensor(2.5).tolist() == 2.5
    assert to_et(torch.tensor([0.5, 1.5], dtype=torch.bfloat16)).tolist() == [0.5, 1.5]
