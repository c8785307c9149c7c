"""Moving tensors between PyTorch and enkai_tensor bit for bit, and comparing."""

import torch

import enkai_tensor as et

DT = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
      torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8", torch.bool: "bool",
      torch.uint8: "uint8"}
TORCH = {v: k for k, v in DT.items()}


def run_in_threads(fn, n):
    """Runs fn(0) .. fn(n-1) on n threads at once and waits for all of them."""
    import threading

    threads = [threading.Thread(target=fn, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def to_et(t):
    t = t.detach().contiguous()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return et.from_bytes(raw, list(t.shape), DT[t.dtype])


def to_torch(e):
    dtype, shape, raw = TORCH[e.dtype], e.shape, e.to_bytes()
    if not raw:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)


# Tolerances of the native (cpu) backend against PyTorch, per class of computation
# and dtype; assert_close passes |got - want| <= atol + rtol*|want| elementwise.
# On the torch backend both sides are the same libtorch kernels, so none of this
# applies there (exact unless a call site says otherwise). Integer and bool results
# are always exact: integer ops are exact or wrap identically.
#
# "elementwise" (add/sub/mul/div, relu/sigmoid/tanh, casts, copies, views): one
# libm/SLEEF evaluation and one rounding per element, so a few units in the last
# place. rtol is that many ulps of the format; atol one step of its subnormal
# range (2^-149, 2^-1074, 2^-133, 2^-24), below which a relative bound means nothing.
#   fp32  4 ulps = 4*2^-23 ~ 4.8e-7: libm's and SLEEF's tanh/sigmoid are each within
#         ~1-2 ulps of the true value, so up to ~4 apart (measured: 1.4).
#   fp64  4 ulps = 4*2^-52, the same argument.
#   bf16  1 ulp  = 2^-7: both sides compute in f32 and round once; f32 results that
#   fp16  1 ulp  = 2^-10  differ in their last bits can round to the neighbouring
#         bf16/fp16 value, never further.
# "reduce" (sum/mean, matmul/linear, softmax, masked softmax, layernorm,
# cross_entropy, gelu, and every gradient: a backward pass is a chain of ops
# and, with broadcasting, sums): sums taken in another order (other blocking and
# vector widths) and chains of roundings. The error of a sum is relative to its
# terms, not to its result (which can cancel to ~0), so atol grows with the
# largest |value| of the expected result, standing in for the terms' size:
# atol = floor + rtol * max|want|.
#   fp32  rtol 1e-5: reordering a sum of n terms moves it by ~n*2^-24 of the
#         terms' size (n <= ~10^2 here); floor 1e-5 for results whose terms are
#         larger than any result element (a sum that cancels; 1+erf(x/sqrt2) in
#         gelu, where torch's vectorised erf is itself ~1e-6 off).
#   fp64  rtol = floor = 1e-12: the fp32 argument at 2^-52, with a wide margin.
#   bf16  4 ulps = 2^-5 (rtol and floor): torch's half-precision backward kernels
#   fp16  4 ulps = 2^-8  are themselves 2-3 ulps (of the largest element) away
#         from an fp64 reference (layernorm's dw/db/dx; some evaluate in half
#         arithmetic with a rounding per operation, e.g. fp16 sigmoid_backward's
#         a*(1-b)*b), the native ones under 1: measured up to 3.2 ulps apart.
NATIVE_TOL = {
    "elementwise": {torch.float32: (4 * 2.0 ** -23, 2.0 ** -149), torch.float64: (4 * 2.0 ** -52, 2.0 ** -1074),
                    torch.bfloat16: (2.0 ** -7, 2.0 ** -133), torch.float16: (2.0 ** -10, 2.0 ** -24)},
    "reduce": {torch.float32: (1e-5, 1e-5), torch.float64: (1e-12, 1e-12),
               torch.bfloat16: (2.0 ** -5, 2.0 ** -5), torch.float16: (2.0 ** -8, 2.0 ** -8)},
}
KINDS = tuple(NATIVE_TOL)


def native_tol(dtype, rtol=0.0, atol=0.0, kind="elementwise", scale=0.0):
    """The (rtol, atol) for `dtype` on the active backend: the caller's on torch
    (same libtorch kernels, so zero unless stated), at least NATIVE_TOL[kind] on
    cpu, where a "reduce" atol also grows by rtol * `scale` (the largest |value|)."""
    if kind not in NATIVE_TOL:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    if et.backend_current() != "cpu" or dtype not in NATIVE_TOL[kind]:
        return rtol, atol
    r, a = NATIVE_TOL[kind][dtype]
    if kind == "reduce":
        a += r * scale
    return max(rtol, r), max(atol, a)


def same(e, t, atol=0.0, rtol=0.0, kind="elementwise", like=None):
    """`e` equals the PyTorch result `t`: shape, dtype and values (NaN == NaN).

    On the torch backend both sides run the same libtorch kernels in the same
    process with the same thread pool, so the default tolerance is zero;
    callers loosen it only where the computation itself differs (stated at
    the call site). On the native backend the class `kind` ("elementwise" or
    "reduce") picks the per-dtype floor from NATIVE_TOL, also that of dtype
    `like` when given (a gradient computed in a narrower dtype than its leaf's);
    explicit atol/rtol still apply when larger. Integer and bool results are
    always exact."""
    finite = t.detach()[t.detach().isfinite()] if t.is_floating_point() else t.new_zeros(0)
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    rtol, atol = native_tol(t.dtype, rtol, atol, kind, scale)
    if like is not None:
        rtol, atol = native_tol(like, rtol, atol, kind, scale)
    got = to_torch(e)
    assert got.dtype == t.dtype, (got.dtype, t.dtype)
    assert tuple(got.shape) == tuple(t.shape), (got.shape, t.shape)
    torch.testing.assert_close(got, t.detach(), atol=atol, rtol=rtol, equal_nan=True)
