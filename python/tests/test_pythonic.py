"""The Python package behaves like torch where the ABI allows: construction
from data, repr, indexing (values and gradients), operators with Python
scalars, numpy interop. torch is the oracle for each."""

import numpy as np
import pytest
import torch

import enkai_tensor as et
from enkai_tensor import _format
from helpers import DT, TORCH, same, to_et

# ---------- construction: torch.tensor's dtype inference ----------

DATA = [1.5, 2, [1, 2, 3], [[1.0, 2.0], [3.0, 4.5]], [True, False], True, [[1, 2], [3, 4]], [], [[]], 0.1]


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


def test_explicit_dtype_and_the_errors_for_bad_data():
    same(et.tensor([1, 2], dtype="bf16"), torch.tensor([1, 2], dtype=torch.bfloat16))
    same(et.tensor([0.1, 0.7], dtype="fp16"), torch.tensor([0.1, 0.7], dtype=torch.float16))
    with pytest.raises(ValueError):
        et.tensor([[1, 2], [3]])
    with pytest.raises(TypeError):
        et.tensor(np.zeros(2, dtype=np.complex64))


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


def test_repr_reads_only_the_corners_of_a_large_tensor():
    e = et.zeros([2000, 2000])
    assert _values_of_torch(torch.zeros(2000, 2000)) in repr(e)
    assert _format.THRESHOLD == 1000 and _format.EDGEITEMS == 3  # torch's defaults


# ---------- indexing through slice ----------

INDEXES = [0, -1, slice(1, 3), slice(None, None, 2), (slice(None), 1), (Ellipsis, -1), (1, slice(2, None)),
           (slice(None), slice(None, None, 3), 0), Ellipsis, slice(5, 100), slice(-3, None), slice(3, 1),
           (0, 0, 0), (Ellipsis, slice(1, 2), 2)]


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
    assert len(e) == 3 and [r.shape for r in e] == [(4,)] * 3
    with pytest.raises(TypeError):
        len(et.tensor(1.0))


# ---------- operators with Python scalars: torch's result dtypes and values ----------

SCALARS = [2, 2.5, True, -3]
OPS = {"add": lambda a, b: a + b, "radd": lambda a, b: b + a, "sub": lambda a, b: a - b,
       "rsub": lambda a, b: b - a, "mul": lambda a, b: a * b, "rmul": lambda a, b: b * a,
       "div": lambda a, b: a / b, "rdiv": lambda a, b: b / a}


@pytest.mark.parametrize("dtype", ["fp32", "fp64", "int64", "int32", "bf16"])
@pytest.mark.parametrize("scalar", SCALARS, ids=repr)
@pytest.mark.parametrize("op", OPS)
def test_scalar_operators_promote_as_torch(op, scalar, dtype):
    ref = (torch.arange(1, 7).reshape(2, 3) % 4 + 1).to(TORCH[dtype])
    f = OPS[op]
    if "sub" in op and isinstance(scalar, bool):
        with pytest.raises(RuntimeError):  # torch refuses `-` with a bool
            f(ref, scalar)
        with pytest.raises(et.EnkaiError):
            f(to_et(ref), scalar)
        return
    want = f(ref, scalar)
    got = f(to_et(ref), scalar)
    # The scalars are exact in every dtype here, so only the division's
    # rounding can differ; bf16 keeps 8 bits, so one bf16 ulp (2^-7 relative).
    tol = 2 ** -7 if dtype == "bf16" else 0.0
    same(got, want, atol=0.0, rtol=tol)


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
