"""Complex tensors (complex64, complex128) on both backends, against
PyTorch 2.13: values, and gradients by `torch.autograd.grad` of a real loss
(PyTorch's conjugate Wirtinger convention: the gradient of a real L with
respect to z = x + iy is dL/dx + i dL/dy).

Tolerances, relative to max(1, the largest |value|): complex64 2e-5 (a few
fp32 ulps: complex exp/log/sqrt and products are a handful of real
operations, each rounded once, and PyTorch's vectorised kernels order them
differently), complex128 1e-12.
"""

import numpy as np
import pytest
import torch

import enkai_tensor as et
from enkai_tensor import safetensors as ets

pytestmark = pytest.mark.usefixtures("backend")

DTYPES = ["complex64", "complex128"]
NP = {"complex64": np.complex64, "complex128": np.complex128}
REAL = {"complex64": np.float32, "complex128": np.float64}
TOL = {"complex64": 2e-5, "complex128": 1e-12}


def crand(rng, shape, dtype):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(NP[dtype])


def rrand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(REAL[dtype])


def both(*arrays, grad=True):
    ours = [et.from_numpy(a) for a in arrays]
    theirs = [torch.from_numpy(np.array(a, copy=True)) for a in arrays]
    if grad:
        for o, t in zip(ours, theirs):
            o.require_grad()
            t.requires_grad_()
    return ours, theirs


def close(ours, ref, tol, what):
    ref = ref.detach().resolve_conj().resolve_neg()
    a, b = ours.numpy(), ref.numpy()
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} vs {b.dtype}"
    assert a.shape == b.shape, f"{what}: shape {a.shape} vs {b.shape}"
    scale = max(1.0, float(np.abs(b).max(initial=0)))
    np.testing.assert_allclose(a, b, rtol=0, atol=tol * scale, err_msg=what)


def check_grads(rng, out_o, out_t, ins_o, ins_t, tol, what):
    """Gradients of the real loss sum(re(conj(w) ⊙ out)) (sum(w ⊙ out) for a real out), w random."""
    shape = tuple(out_t.shape)
    if out_t.is_complex():
        w = np.asarray(crand(rng, shape, "complex128").astype(out_t.detach().resolve_conj().resolve_neg().numpy().dtype))
        wc = np.asarray(np.conj(w))
        loss_o = et.op("real", out_o * et.from_numpy(wc)).sum()
        loss_t = torch.real(out_t * torch.from_numpy(wc)).sum()
    else:
        w = np.asarray(rng.standard_normal(shape).astype(out_t.detach().resolve_conj().resolve_neg().numpy().dtype))
        loss_o = (out_o * et.from_numpy(w)).sum()
        loss_t = (out_t * torch.from_numpy(w)).sum()
    loss_o.backward()
    grads = torch.autograd.grad(loss_t, ins_t)
    for k, (o, g) in enumerate(zip(ins_o, grads)):
        assert o.grad is not None, f"{what}: no gradient for input {k}"
        close(o.grad, g, tol, f"grad {k} of {what}")


# ---------------------------------------------------------------- data in and out


@pytest.mark.parametrize("dtype", DTYPES)
def test_bytes_numpy_lists_and_repr(dtype):
    rng = np.random.default_rng(0)
    a = crand(rng, (2, 3), dtype)
    t = et.from_numpy(a)
    assert t.dtype == dtype and list(t.shape) == [2, 3]
    np.testing.assert_array_equal(t.numpy(), a)
    # interleaved (re, im), as PyTorch stores them
    assert t.to_bytes() == torch.from_numpy(a).numpy().tobytes()
    assert t.tolist() == [[complex(v) for v in row] for row in a.tolist()]
    assert "+" in repr(t) or "-" in repr(t)
    assert f"dtype={dtype}" in repr(t)
    s = et.Tensor([[1 + 2j, 3], [0.5j, -1]])
    assert s.dtype == "complex64"
    np.testing.assert_array_equal(s.numpy(), torch.tensor([[1 + 2j, 3], [0.5j, -1]]).numpy())


@pytest.mark.parametrize("dtype", DTYPES)
def test_conversions_keep_the_real_part(dtype):
    rng = np.random.default_rng(1)
    a = crand(rng, (5,), dtype)
    (o,), (t,) = both(a, grad=False)
    for target, tt in (("fp32", torch.float32), ("fp64", torch.float64)):
        close(o.to_dtype(target), t.to(tt), 0, f"{dtype} to {target}")
    r = rrand(rng, (4,), dtype)
    close(et.from_numpy(r).to_dtype(dtype), torch.from_numpy(r).to(getattr(torch, dtype)), 0, "real to complex")
    other = "complex128" if dtype == "complex64" else "complex64"
    close(o.to_dtype(other), t.to(getattr(torch, other)), TOL["complex64"], f"{dtype} to {other}")


# ---------------------------------------------------------------- elementwise


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "neg", "abs", "angle", "conj", "real", "imag"])
def test_unary(name, dtype):
    rng = np.random.default_rng(2)
    for shape in ((4, 3), (), (2, 0)):
        a = crand(rng, shape, dtype)
        (o,), (t,) = both(a)
        got, ref = et.op(name, o), getattr(torch, name)(t)
        close(got, ref, TOL[dtype], f"{name} {shape}")
        if name in ("real", "imag", "conj", "neg"):
            # PyTorch's are views or lazy: give ours a fresh tensor to differentiate.
            got, ref = got * 1.0, ref * 1.0
        check_grads(rng, got, ref, [o], [t], TOL[dtype] * 10, f"{name} {shape}")


def test_branch_cuts_and_zeros():
    # sqrt and log on the negative real axis (both signs of zero), abs/angle at 0.
    vals = np.array([-4 + 0j, -4 - 0j, complex(-4, -0.0), 0j, 1e-30 + 1e-30j, 3 + 4j, -1e30 + 1j], dtype=np.complex128)
    for dtype in DTYPES:
        a = vals.astype(NP[dtype])
        (o,), (t,) = both(a, grad=False)
        for name in ("sqrt", "log", "abs", "angle", "exp"):
            close(et.op(name, o), getattr(torch, name)(t), TOL[dtype], f"{name} {dtype}")
    (o,), (t,) = both(np.array([0j, 3 + 4j], dtype=np.complex128))
    check_grads(np.random.default_rng(3), et.op("abs", o), torch.abs(t), [o], [t], 1e-12, "abs at 0")
    (o,), (t,) = both(np.array([0j, 3 + 4j], dtype=np.complex128))
    check_grads(np.random.default_rng(3), et.op("angle", o), torch.angle(t), [o], [t], 1e-12, "angle at 0")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["add", "sub", "mul", "div"])
def test_binary_broadcast_and_mixed(name, dtype):
    rng = np.random.default_rng(4)
    for sa, sb in (((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (3,))):
        a, b = crand(rng, sa, dtype), crand(rng, sb, dtype)
        (oa, ob), (ta, tb) = both(a, b)
        got, ref = et.op(name, oa, ob), getattr(torch, name)(ta, tb)
        close(got, ref, TOL[dtype], f"{name} {sa} {sb}")
        check_grads(rng, got, ref, [oa, ob], [ta, tb], TOL[dtype] * 10, f"{name} {sa} {sb}")
        # complex with a real tensor: the real input's gradient is the real part
        r = rrand(rng, sb, dtype)
        (oa, orr), (ta, tr) = both(a, r)
        got, ref = et.op(name, oa, orr), getattr(torch, name)(ta, tr)
        close(got, ref, TOL[dtype], f"{name} {sa} real {sb}")
        check_grads(rng, got, ref, [oa, orr], [ta, tr], TOL[dtype] * 10, f"{name} {sa} real {sb}")
    # with a Python number, and add's alpha
    a = crand(rng, (3,), dtype)
    (oa,), (ta,) = both(a)
    close(et.op(name, oa, other=2.5), getattr(torch, name)(ta, 2.5), TOL[dtype], f"{name} scalar")
    if name in ("add", "sub"):
        b = crand(rng, (3,), dtype)
        (oa, ob), (ta, tb) = both(a, b)
        got, ref = et.op(name, oa, ob, alpha=-1.5), getattr(torch, name)(ta, tb, alpha=-1.5)
        close(got, ref, TOL[dtype], f"{name} alpha")
        check_grads(rng, got, ref, [oa, ob], [ta, tb], TOL[dtype] * 10, f"{name} alpha")


def test_promotion():
    rng = np.random.default_rng(5)
    c64 = crand(rng, (3,), "complex64")
    f64 = rng.standard_normal(3)
    cases = [
        (et.from_numpy(c64), et.from_numpy(f64), torch.from_numpy(c64), torch.from_numpy(f64)),
        (et.from_numpy(c64), et.from_numpy(np.array(2.0)), torch.from_numpy(c64), torch.tensor(2.0, dtype=torch.float64)),
        (et.from_numpy(np.array(1 + 1j, np.complex128)), et.from_numpy(f64.astype(np.float32)),
         torch.tensor(1 + 1j, dtype=torch.complex128), torch.from_numpy(f64.astype(np.float32))),
    ]
    for oa, ob, ta, tb in cases:
        got, ref = et.op("mul", oa, ob), ta * tb
        close(got, ref, 1e-6, f"promotion {ta.dtype} {tb.dtype}")
    assert (et.from_numpy(f64.astype(np.float32)) * 1j).dtype == "complex64"
    assert (et.from_numpy(f64) * 1j).dtype == "complex128"


# ---------------------------------------------------------------- parts and views


@pytest.mark.parametrize("dtype", DTYPES)
def test_view_as_real_and_complex(dtype):
    rng = np.random.default_rng(6)
    a = crand(rng, (3, 2), dtype)
    (o,), (t,) = both(a)
    got, ref = et.op("view_as_real", o), torch.view_as_real(t)
    close(got, ref, 0, "view_as_real")
    check_grads(rng, got * 1.0, ref * 1.0, [o], [t], TOL[dtype], "view_as_real")
    r = rrand(rng, (4, 3, 2), dtype)
    (o,), (t,) = both(r)
    got, ref = et.op("view_as_complex", o), torch.view_as_complex(t)
    close(got, ref, 0, "view_as_complex")
    check_grads(rng, got * 1.0, ref * 1.0, [o], [t], TOL[dtype], "view_as_complex")
    # a strided view: a transposed real tensor has no stride-1 last dim
    with pytest.raises(et.EnkaiError) as e:
        et.op("view_as_complex", et.op("transpose", et.from_numpy(rrand(rng, (2, 5), dtype)), dim0=0, dim1=1))
    assert e.value.code == "E_SHAPE"
    with pytest.raises(et.EnkaiError) as e:
        et.op("view_as_complex", et.from_numpy(rrand(rng, (2, 3), dtype)))
    assert e.value.code == "E_SHAPE"


@pytest.mark.parametrize("dtype", DTYPES)
def test_polar_and_complex(dtype):
    rng = np.random.default_rng(7)
    for sa, sb in (((3, 4), (3, 4)), ((2, 1), (3,))):
        m, th = np.abs(rrand(rng, sa, dtype)) + 0.1, rrand(rng, sb, dtype)
        (om, ot), (tm, tt) = both(m, th)
        got, ref = et.op("polar", om, ot), torch.polar(tm, tt)
        close(got, ref, TOL[dtype], f"polar {sa} {sb}")
        check_grads(rng, got, ref, [om, ot], [tm, tt], TOL[dtype] * 10, f"polar {sa} {sb}")
        re, im = rrand(rng, sa, dtype), rrand(rng, sb, dtype)
        (o1, o2), (t1, t2) = both(re, im)
        got, ref = et.op("complex", o1, o2), torch.complex(t1, t2)
        close(got, ref, 0, f"complex {sa} {sb}")
        check_grads(rng, got, ref, [o1, o2], [t1, t2], TOL[dtype], f"complex {sa} {sb}")


# ---------------------------------------------------------------- products and reductions


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_and_einsum(dtype):
    rng = np.random.default_rng(8)
    for sa, sb in (((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 2)), ((4,), (4, 3)), ((3, 4), (4,)), ((70, 40), (40, 90))):
        a, b = crand(rng, sa, dtype), crand(rng, sb, dtype)
        (oa, ob), (ta, tb) = both(a, b)
        got, ref = et.op("matmul", oa, ob), torch.matmul(ta, tb)
        close(got, ref, TOL[dtype] * 4, f"matmul {sa} {sb}")
        check_grads(rng, got, ref, [oa, ob], [ta, tb], TOL[dtype] * 40, f"matmul {sa} {sb}")
    for eq, shapes in (("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 2)]), ("ii->", [(4, 4)]),
                       ("i,j->ij", [(3,), (4,)]), ("ij,jk,kl,lm->im", [(2, 3), (3, 4), (4, 5), (5, 2)]), ("...ij->...ji", [(2, 3, 4)])):
        arrays = [crand(rng, s, dtype) for s in shapes]
        os_, ts = both(*arrays)
        got, ref = et.einsum(eq, *os_), torch.einsum(eq, *ts)
        close(got, ref, TOL[dtype] * 10, f"einsum {eq}")
        check_grads(rng, got, ref, os_, ts, TOL[dtype] * 100, f"einsum {eq}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_sum_and_mean(dtype):
    rng = np.random.default_rng(9)
    a = crand(rng, (3, 4, 5), dtype)
    for name in ("sum", "mean"):
        for kwargs in ({}, {"dim": [1]}, {"dim": [0, 2], "keepdim": True}):
            (o,), (t,) = both(a)
            got, ref = et.op(name, o, **kwargs), getattr(torch, name)(t, **kwargs)
            close(got, ref, TOL[dtype] * 4, f"{name} {kwargs}")
            check_grads(rng, got, ref, [o], [t], TOL[dtype] * 4, f"{name} {kwargs}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_shape_ops(dtype):
    rng = np.random.default_rng(10)
    a, b = crand(rng, (2, 3, 4), dtype), crand(rng, (2, 3, 4), dtype)
    cases = [
        ("reshape", lambda x: (x,), {"shape": [6, 4]}),
        ("permute", lambda x: (x,), {"dims": [2, 0, 1]}),
        ("transpose", lambda x: (x,), {"dim0": 0, "dim1": 2}),
        ("select", lambda x: (x,), {"dim": 1, "index": 2}),
        ("narrow", lambda x: (x,), {"dim": 2, "start": 1, "length": 2}),
        ("flip", lambda x: (x,), {"dims": [1]}),
        ("unsqueeze", lambda x: (x,), {"dim": 0}),
        ("flatten", lambda x: (x,), {}),
        ("clone", lambda x: (x,), {}),
        ("expand", lambda x: (x,), {"size": [2, 2, 3, 4]}),
        ("broadcast_to", lambda x: (x,), {"size": [2, 2, 3, 4]}),
        ("unflatten", lambda x: (x,), {"dim": 2, "sizes": [2, 2]}),
        ("diagonal", lambda x: (x,), {}),
        ("movedim", lambda x: (x,), {"source": 0, "destination": 2}),
        ("repeat", lambda x: (x,), {"repeats": [1, 2, 1]}),
        ("tile", lambda x: (x,), {"dims": [2]}),
        ("roll", lambda x: (x,), {"shifts": [1], "dims": [1]}),
        ("contiguous", lambda x: (x,), {}),
    ]
    for name, args, kwargs in cases:
        (o,), (t,) = both(a)
        ref_fn = getattr(torch, name, None) or (lambda x, **kw: getattr(x, name)(**kw))
        got, ref = et.op(name, *args(o), **kwargs), ref_fn(*args(t), **kwargs)
        close(got, ref, 0, name)
        check_grads(rng, got * 1.0, ref * 1.0, [o], [t], TOL[dtype], name)
    for name in ("cat", "stack"):
        (o1, o2), (t1, t2) = both(a, b)
        got, ref = et.op(name, [o1, o2], dim=1), getattr(torch, name)([t1, t2], dim=1)
        close(got, ref, 0, name)
        check_grads(rng, got, ref, [o1, o2], [t1, t2], TOL[dtype], name)


# ---------------------------------------------------------------- refusals and interchange


@pytest.mark.parametrize("dtype", DTYPES)
def test_ops_without_complex_refuse_it(dtype):
    rng = np.random.default_rng(11)
    z = et.from_numpy(crand(rng, (3,), dtype))
    for name, args in (("relu", (z,)), ("sort", (z,)), ("amax", (z,)), ("sigmoid", (z,)), ("maximum", (z, z)), ("lt", (z, z))):
        with pytest.raises(et.EnkaiError) as e:
            et.op(name, *args)
        assert e.value.code == "E_DTYPE", name
        assert dtype in str(e.value), name
    with pytest.raises(et.EnkaiError) as e:
        et.op("imag", et.from_numpy(np.ones(3, np.float32)))
    assert e.value.code == "E_DTYPE"
    with pytest.raises(et.EnkaiError) as e:
        et.op("view_as_real", et.from_numpy(np.ones(3, np.float32)))
    assert e.value.code == "E_DTYPE"
    with pytest.raises(et.EnkaiError) as e:
        et.op("div", z, z, rounding_mode="floor")
    assert e.value.code == "E_DTYPE"
    # as torch: the implicit gradient of backward() needs a real loss
    w = et.from_numpy(crand(rng, (3,), dtype))
    w.require_grad()
    with pytest.raises(et.EnkaiError) as e:
        (w * w).sum().backward()
    assert e.value.code == "E_AUTOGRAD"


def test_dlpack_carries_complex():
    rng = np.random.default_rng(12)
    for dtype in DTYPES:
        a = crand(rng, (3, 2), dtype)
        o = et.from_numpy(a)
        t = torch.from_dlpack(o)
        assert t.dtype == getattr(torch, dtype)
        np.testing.assert_array_equal(t.numpy(), a)
        back = et.from_dlpack(torch.from_numpy(a.copy()))
        assert back.dtype == dtype
        np.testing.assert_array_equal(back.numpy(), a)


def test_safetensors_carries_complex(tmp_path):
    from safetensors.torch import load_file as ref_load, save_file as ref_save

    rng = np.random.default_rng(13)
    a, b = crand(rng, (3, 2), "complex64"), crand(rng, (4,), "complex128")
    path = str(tmp_path / "c.safetensors")
    ets.save_file({"a": et.from_numpy(a), "b": et.from_numpy(b)}, path)
    got = ets.load_file(path)
    np.testing.assert_array_equal(got["a"].numpy(), a)
    np.testing.assert_array_equal(got["b"].numpy(), b)
    # C64 is the reference's name; it has none for complex128 (C128 is ours alone).
    ref_path = str(tmp_path / "ref.safetensors")
    ref_save({"a": torch.from_numpy(a)}, ref_path)
    np.testing.assert_array_equal(ets.load_file(ref_path)["a"].numpy(), a)
    ets.save_file({"a": et.from_numpy(a)}, path)
    np.testing.assert_array_equal(ref_load(path)["a"].numpy(), a)


# ---------------------------------------------------------------- torch.fft

NORMS = [None, "backward", "forward", "ortho"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["fft", "ifft"])
def test_fft_ifft(name, dtype):
    rng = np.random.default_rng(14)
    for shape, kwargs in (((8,), {}), ((3, 10), {"dim": 0}), ((2, 7, 5), {"dim": 1, "n": 9}), ((4, 12), {"n": 5}),
                          ((6,), {"n": 1}), ((2, 17), {})):
        for norm in NORMS:
            kw = dict(kwargs, norm=norm)
            a = crand(rng, shape, dtype)
            (o,), (t,) = both(a)
            got, ref = getattr(et.fft, name)(o, **kw), getattr(torch.fft, name)(t, **kw)
            close(got, ref, TOL[dtype] * 10, f"{name} {shape} {kw}")
            check_grads(rng, got, ref, [o], [t], TOL[dtype] * 10, f"{name} {shape} {kw}")
    # a real input is taken as complex; its gradient is real
    r = rrand(rng, (4, 6), dtype)
    (o,), (t,) = both(r)
    got, ref = getattr(et.fft, name)(o, n=8), getattr(torch.fft, name)(t, n=8)
    close(got, ref, TOL[dtype] * 10, f"{name} of a real input")
    check_grads(rng, got, ref, [o], [t], TOL[dtype] * 10, f"{name} of a real input")


@pytest.mark.parametrize("dtype", DTYPES)
def test_rfft_irfft(dtype):
    rng = np.random.default_rng(15)
    for shape, kwargs in (((8,), {}), ((3, 9), {}), ((5, 4), {"dim": 0}), ((2, 6, 3), {"dim": 1, "n": 10}), ((4, 7), {"n": 4}), ((1,), {})):
        for norm in NORMS:
            kw = dict(kwargs, norm=norm)
            a = rrand(rng, shape, dtype)
            (o,), (t,) = both(a)
            got, ref = et.fft.rfft(o, **kw), torch.fft.rfft(t, **kw)
            close(got, ref, TOL[dtype] * 10, f"rfft {shape} {kw}")
            check_grads(rng, got, ref, [o], [t], TOL[dtype] * 10, f"rfft {shape} {kw}")
    for shape, kwargs in (((5,), {}), ((3, 5), {"n": 9}), ((4, 3), {"dim": 0}), ((2, 4, 3), {"dim": 1, "n": 4}), ((6,), {"n": 16}), ((3, 2), {})):
        for norm in NORMS:
            kw = dict(kwargs, norm=norm)
            a = crand(rng, shape, dtype)
            (o,), (t,) = both(a)
            got, ref = et.fft.irfft(o, **kw), torch.fft.irfft(t, **kw)
            close(got, ref, TOL[dtype] * 10, f"irfft {shape} {kw}")
            check_grads(rng, got, ref, [o], [t], TOL[dtype] * 10, f"irfft {shape} {kw}")
    # round trip
    x = rrand(rng, (3, 64), dtype)
    back = et.fft.irfft(et.fft.rfft(et.from_numpy(x)), n=64)
    np.testing.assert_allclose(back.numpy(), x, atol=TOL[dtype] * 10)


def test_fft_refusals():
    x = et.from_numpy(np.ones((4,), np.float32))
    z = et.from_numpy(np.ones((4,), np.complex64))
    cases = [
        (lambda: et.fft.rfft(z), "E_DTYPE"),
        (lambda: et.fft.fft(x.to_dtype("fp16")), "E_DTYPE"),
        (lambda: et.fft.fft(x, n=0), "E_INVALID_ARG"),
        (lambda: et.fft.fft(x, norm="bogus"), "E_INVALID_ARG"),
        (lambda: et.fft.fft(x, dim=1), "E_SHAPE"),
        (lambda: et.fft.fft(et.from_numpy(np.array(1.0, np.float32))), "E_SHAPE"),
        (lambda: et.fft.irfft(et.from_numpy(np.ones((1,), np.complex64))), "E_INVALID_ARG"),
    ]
    for f, code in cases:
        with pytest.raises(et.EnkaiError) as e:
            f()
        assert e.value.code == code, (code, str(e.value))


# ---------------------------------------------------------------- linalg.eig

EIG_TOL = {"fp32": 1e-4, "fp64": 1e-10}


def _eig_loss(lib, L, V, w):
    """A real loss invariant to the eigenvectors' phases and to the order of the eigenpairs."""
    re, im = lib.real(L), lib.imag(L)
    return (re * re * re).sum() + (im * im).sum() + (V.abs() * V.abs() * w * re.unsqueeze(-2)).sum()


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_eig_by_its_properties_and_gauge_invariant_gradients(dtype):
    rng = np.random.default_rng(16)
    tol = EIG_TOL[dtype]
    npdt = np.float32 if dtype == "fp32" else np.float64
    for shape in ((4, 4), (2, 5, 5), (1, 1)):
        a = rng.standard_normal(shape).astype(npdt)
        (o,), (t,) = both(a)
        L, V = et.linalg.eig(o)
        tL, tV = torch.linalg.eig(t)
        cdt = "complex64" if dtype == "fp32" else "complex128"
        assert L.dtype == cdt and V.dtype == cdt
        l, v = L.numpy().astype(np.complex128), V.numpy().astype(np.complex128)
        key = lambda z: np.lexsort((np.round(z.imag, 6), np.round(z.real, 6)), axis=-1)
        np.testing.assert_allclose(np.take_along_axis(l, key(l), -1), np.take_along_axis(tL.detach().numpy(), key(tL.detach().numpy()), -1),
                                   atol=tol * 10)
        np.testing.assert_allclose(a.astype(np.float64) @ v, v * l[..., None, :], atol=tol * 10 * max(1, np.abs(a).max()))
        np.testing.assert_allclose(np.linalg.norm(v, axis=-2), 1.0, atol=tol)
        w = rng.standard_normal(shape[:-1] + (1,)).astype(npdt)
        _eig_loss(et, L, V, et.from_numpy(w)).backward()
        (g,) = torch.autograd.grad(_eig_loss(torch, tL, tV, torch.from_numpy(w)), [t])
        np.testing.assert_allclose(o.grad.numpy(), g.numpy(), atol=tol * 100 * max(1, float(np.abs(g.numpy()).max())))
    with pytest.raises(et.EnkaiError) as e:
        et.linalg.eig(et.from_numpy(np.ones((2, 3), npdt)))
    assert e.value.code == "E_SHAPE"
    with pytest.raises(et.EnkaiError) as e:
        et.linalg.eig(et.from_numpy(np.ones((2, 2), np.complex64)))
    assert e.value.code == "E_DTYPE"


TESTED = {"real", "imag", "view_as_real", "view_as_complex", "conj", "angle", "polar", "complex", "add", "sub", "mul", "div",
          "neg", "exp", "log", "sqrt", "abs", "matmul", "einsum", "sum", "mean", "reshape", "permute", "transpose", "select",
          "narrow", "flip", "unsqueeze", "flatten", "clone", "cat", "stack", "expand", "broadcast_to", "unflatten",
          "diagonal", "movedim", "repeat", "tile", "roll", "contiguous", "fft.fft", "fft.ifft", "fft.rfft", "fft.irfft"}


def test_every_row_that_takes_complex_is_covered_or_a_view():
    """The table says which rows take complex tensors (`"complex"` in the
    schema); each is tested above, or is a shape op whose kernel moves
    elements without reading them (tested through the ones above), or is an
    in-place form of a tested row."""
    rows = {o["name"] for o in et.op_schema() if o["complex"]}
    shape_ops = {"squeeze", "split", "chunk", "t", "view", "detach", "mm", "bmm"}
    inplace = {n for n in rows if n.endswith("_") and n[:-1] in TESTED}
    assert rows - TESTED - shape_ops - inplace == set()
    assert TESTED <= rows
