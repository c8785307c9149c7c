"""Moving tensors between PyTorch and enkai_tensor bit for bit, and comparing."""

import torch

import enkai_tensor as et

DT = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
      torch.int64: "int64", torch.int32: "int32", torch.bool: "bool", torch.uint8: "uint8"}
TORCH = {v: k for k, v in DT.items()}


def to_et(t):
    t = t.detach().contiguous()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return et.from_bytes(raw, list(t.shape), DT[t.dtype])


def to_torch(e):
    dtype, shape, raw = TORCH[e.dtype], e.shape, e.to_bytes()
    if not raw:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)


# Tolerances of the native (cpu) backend against PyTorch, per dtype, as (rtol, atol).
# Its kernels are its own: the same formulas, but other summation orders and
# vector widths. fp32: relative 1e-5, what reductions, matmul and the fused
# softmax/layernorm/cross-entropy reach when a sum of up to ~10^3 terms is
# taken in another order (elementwise ops are within a few ulps, well
# inside it). fp64: the same argument at 2^-52. bf16/fp16: one unit in the
# last place of the format (2^-7, 2^-10 relative): the f32 results differ in
# their last bits, which can round to the neighbouring bf16/fp16 value.
# Integers and bool: exact.
NATIVE_TOL = {torch.float32: (1e-5, 1e-6), torch.float64: (1e-12, 1e-12),
              torch.bfloat16: (2.0 ** -7, 2.0 ** -7), torch.float16: (2.0 ** -10, 2.0 ** -10)}


def native_tol(dtype, rtol=0.0, atol=0.0):
    """The tolerance for `dtype` on the active backend: the caller's on torch
    (same libtorch kernels, so zero unless stated), at least NATIVE_TOL on cpu."""
    if et.backend_current() != "cpu" or dtype not in NATIVE_TOL:
        return rtol, atol
    r, a = NATIVE_TOL[dtype]
    return max(rtol, r), max(atol, a)


def same(e, t, atol=0.0, rtol=0.0):
    """`e` equals the PyTorch result `t`: shape, dtype and values (NaN == NaN).

    On the torch backend both sides run the same libtorch kernels in the same
    process with the same thread pool, so the default tolerance is zero;
    callers loosen it only where the computation itself differs (stated at
    the call site). On the native backend, `native_tol` applies."""
    rtol, atol = native_tol(t.dtype, rtol, atol)
    got = to_torch(e)
    assert got.dtype == t.dtype, (got.dtype, t.dtype)
    assert tuple(got.shape) == tuple(t.shape), (got.shape, t.shape)
    torch.testing.assert_close(got, t.detach(), atol=atol, rtol=rtol, equal_nan=True)
