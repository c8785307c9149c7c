"""`scaled_dot_product_attention` beyond the op table's small cases: shapes
that span several tiles of the native kernel (64 query rows × 256 keys),
rows that see no key, grouped-query heads, and dropout, against
`torch.nn.functional.scaled_dot_product_attention` on both backends.

Tolerances: fp32 values and gradients within 2e-5 (the online softmax sums
in a different order than PyTorch's kernels, over up to 600 keys: a few
ulps of the O(1) outputs); fp64 within 1e-11."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import enkai_tensor as et

pytestmark = pytest.mark.usefixtures("backend")
TOL = {"fp32": 2e-5, "fp64": 1e-11}


def pair(rng, shape, dtype, grad=True):
    a = rng.standard_normal(shape).astype(np.float64 if dtype == "fp64" else np.float32)
    ours, theirs = et.from_numpy(a), torch.from_numpy(a.copy())
    if grad:
        ours.require_grad()
        theirs.requires_grad_()
    return ours, theirs


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("q, k, v, mask, kw", [
    ([2, 3, 130, 32], [2, 3, 300, 32], [2, 3, 300, 16], None, {"is_causal": True}),
    ([1, 4, 200, 16], [1, 2, 600, 16], [1, 2, 600, 24], "float", {"enable_gqa": True}),
    ([2, 65, 8], [2, 257, 8], [2, 257, 8], "bool", {"scale": 0.7}),
    ([1, 2, 300, 16], [1, 2, 300, 16], [1, 2, 300, 16], None, {"is_causal": True}),
])
def test_values_and_gradients_across_tiles(dtype, q, k, v, mask, kw):
    rng = np.random.default_rng(1)
    (oq, tq), (ok, tk), (ov, tv) = pair(rng, q, dtype), pair(rng, k, dtype), pair(rng, v, dtype)
    ours_in, theirs_in = [oq, ok, ov], [tq, tk, tv]
    if mask == "float":
        om, tm = pair(rng, [q[-2], k[-2]], dtype)
        ours_in.append(om)
        theirs_in.append(tm)
    elif mask == "bool":
        m = rng.random([q[-2], k[-2]]) < 0.2
        m[5] = False  # a query that sees no key: zeros, as PyTorch gives
        ours_in.append(et.from_numpy(m))
        theirs_in.append(torch.from_numpy(m))
    got = et.op("scaled_dot_product_attention", *ours_in, **kw)
    ref = F.scaled_dot_product_attention(*theirs_in[:3], attn_mask=theirs_in[3] if len(theirs_in) > 3 else None, **kw)
    tol = TOL[dtype]
    np.testing.assert_allclose(got.numpy(), ref.detach().numpy(), rtol=0, atol=tol)
    w = rng.standard_normal(list(ref.shape)).astype(got.numpy().dtype)
    (got * et.from_numpy(w)).sum().backward()
    (ref * torch.from_numpy(w)).sum().backward()
    for i, (o, t) in enumerate(zip(ours_in, theirs_in)):
        if t.grad is not None:
            np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=0, atol=tol * 10, err_msg=f"grad {i}")


def test_half_dtypes_round_once(backend):
    """bf16 and fp16 inputs compute in fp32 and round the result once: within
    one rounding of PyTorch's (its CPU kernels accumulate in fp32 too)."""
    rng = np.random.default_rng(2)
    for dtype, t_dtype, tol in [("bf16", torch.bfloat16, 1.6e-2), ("fp16", torch.float16, 2e-3)]:
        arrays = [rng.standard_normal([1, 2, 100, 16]).astype(np.float32) for _ in range(3)]
        ours = [et.from_numpy(a).to_dtype(dtype) for a in arrays]
        theirs = [torch.from_numpy(a).to(t_dtype) for a in arrays]
        got = et.op("scaled_dot_product_attention", *ours, is_causal=True)
        ref = F.scaled_dot_product_attention(*theirs, is_causal=True)
        assert got.dtype == dtype
        np.testing.assert_allclose(got.to_dtype("fp32").numpy(), ref.float().numpy(), rtol=tol, atol=tol)


def test_dropout(backend):
    """Dropout draws from the library's seeded generator, so its values
    cannot equal PyTorch's: p = 1 drops everything (zeros, as PyTorch), a
    seed replays the same draw, and the mean over many draws approaches the
    output without dropout (each kept weight is scaled by 1/(1-p))."""
    rng = np.random.default_rng(3)
    q, k, v = (et.from_numpy(rng.standard_normal([1, 1, 8, 4]).astype(np.float64)) for _ in range(3))
    sdpa = lambda **kw: et.op("scaled_dot_product_attention", q, k, v, **kw).numpy()
    assert np.all(sdpa(dropout_p=1.0) == 0)
    et.manual_seed(5)
    a = sdpa(dropout_p=0.3)
    et.manual_seed(5)
    np.testing.assert_array_equal(a, sdpa(dropout_p=0.3))
    assert not np.allclose(a, sdpa(dropout_p=0.0))
    mean = np.mean([sdpa(dropout_p=0.3) for _ in range(2000)], axis=0)
    np.testing.assert_allclose(mean, sdpa(dropout_p=0.0), atol=0.1)
    with pytest.raises(et.EnkaiError, match="dropout probability") as e:
        sdpa(dropout_p=1.5)
    assert e.value.code == "E_INVALID_ARG"


def test_dropout_gradient_uses_the_same_draw(backend):
    """The backward pass multiplies by the forward's own mask: for a linear
    loss the gradient equals the finite difference through a replayed draw."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal([1, 1, 6, 4])
    q0, k, v = a, rng.standard_normal([1, 1, 6, 4]), rng.standard_normal([1, 1, 6, 4])
    kt, vt = et.from_numpy(k), et.from_numpy(v)

    def f(qa):
        et.manual_seed(9)
        return et.op("scaled_dot_product_attention", et.from_numpy(qa), kt, vt, dropout_p=0.4).numpy().sum()

    q = et.from_numpy(q0).require_grad()
    et.manual_seed(9)
    et.op("scaled_dot_product_attention", q, kt, vt, dropout_p=0.4).sum().backward()
    g, eps = q.grad.numpy(), 1e-6
    for idx in [(0, 0, 0, 0), (0, 0, 3, 2), (0, 0, 5, 1)]:
        d = np.zeros_like(q0)
        d[idx] = eps
        fd = (f(q0 + d) - f(q0 - d)) / (2 * eps)
        assert abs(fd - g[idx]) < 1e-6, (idx, fd, g[idx])


def test_mask_with_is_causal_and_bad_arguments_are_refused(backend):
    x = et.from_numpy(np.ones([2, 3, 4], np.float32))
    m = et.from_numpy(np.ones([3, 3], bool))
    cases = [
        (lambda: et.op("scaled_dot_product_attention", x, x, x, m, is_causal=True), "E_INVALID_ARG"),
        (lambda: et.op("scaled_dot_product_attention", x, x, et.from_numpy(np.ones([2, 5, 4], np.float32))), "E_SHAPE"),
        (lambda: et.op("scaled_dot_product_attention", x, x, x.to_dtype("fp64")), "E_DTYPE"),
        (lambda: et.op("scaled_dot_product_attention", x, x, x, et.from_numpy(np.ones([3, 3], np.int64))), "E_DTYPE"),
        (lambda: et.op("scaled_dot_product_attention", x, x, x, et.from_numpy(np.ones([4, 3], bool))), "E_SHAPE"),
    ]
    for fn, code in cases:
        with pytest.raises(et.EnkaiError) as e:
            fn()
        assert e.value.code == code or (backend == "torch" and e.value.code == "E_TORCH"), str(e.value)
