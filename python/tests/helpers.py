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


def same(e, t, atol=0.0, rtol=0.0):
    """`e` equals the PyTorch result `t`: shape, dtype and values (NaN == NaN).

    Both sides run the same libtorch kernels in the same process with the
    same thread pool, so the default tolerance is zero; callers loosen it only
    where the computation itself differs (stated at the call site)."""
    got = to_torch(e)
    assert got.dtype == t.dtype, (got.dtype, t.dtype)
    assert tuple(got.shape) == tuple(t.shape), (got.shape, t.shape)
    torch.testing.assert_close(got, t.detach(), atol=atol, rtol=rtol, equal_nan=True)
