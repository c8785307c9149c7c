"""torch.linalg's factorizations and solvers on both backends, against
PyTorch 2.13 (values and `torch.autograd.grad`), on inputs built with a
known conditioning: random orthogonal factors around chosen singular
values (well: cond 10; badly: cond 1e4), symmetric positive-definite ones
as X Xᵀ + n I. Decompositions are checked by their properties where the
factor is not unique (eigenvectors' signs): reconstruction, orthogonality,
and gradients of gauge-invariant losses.

Tolerances, relative to the largest |value|: fp64 1e-9 (well) and 1e-7
(badly: the error grows with cond·eps); fp32 1e-4 and 3e-2. Gradients of
an inverse scale with cond², hence the badly-conditioned fp32 gradient
tolerance of 5e-2.
"""

import numpy as np
import pytest
import torch

import enkai_tensor as et

pytestmark = pytest.mark.usefixtures("backend")

NP = {"fp32": np.float32, "fp64": np.float64}
TOL = {("fp64", "well"): 1e-9, ("fp64", "bad"): 1e-7, ("fp32", "well"): 1e-4, ("fp32", "bad"): 3e-2}
COND = {"well": 10.0, "bad": 1e4}


def conditioned(rng, shape, cond, dtype):
    """Matrices U diag(s) Vᵀ with singular values from 1 to 1/cond."""
    *lead, n, _ = shape
    out = np.empty(shape, np.float64)
    for idx in np.ndindex(*lead):
        u, _ = np.linalg.qr(rng.standard_normal((n, n)))
        v, _ = np.linalg.qr(rng.standard_normal((n, n)))
        s = np.geomspace(1.0, 1.0 / cond, n)
        out[idx] = (u * s) @ v.T
    return out.astype(NP[dtype])


def spd(rng, shape, dtype):
    *lead, n, _ = shape
    x = rng.standard_normal(shape)
    return (x @ np.swapaxes(x, -1, -2) + n * np.eye(n)).astype(NP[dtype])


def close(ours, ref, tol, what):
    a, b = ours.numpy().astype(np.float64), ref.detach().numpy().astype(np.float64)
    assert a.shape == b.shape, what
    scale = max(1.0, float(np.abs(b).max(initial=0)))
    np.testing.assert_allclose(a, b, rtol=0, atol=tol * scale, err_msg=what)


def both(arrays, grad=True):
    ours = [et.from_numpy(a) for a in arrays]
    theirs = [torch.from_numpy(a.copy()) for a in arrays]
    if grad:
        for o, t in zip(ours, theirs):
            o.require_grad()
            t.requires_grad_()
    return ours, theirs


def check_grads(rng, ours_out, theirs_out, ours_in, theirs_in, tol, what):
    """The gradient of sum(w ⊙ out) for a random w, for each input."""
    w = rng.standard_normal(tuple(theirs_out.shape)).astype(theirs_out.detach().numpy().dtype)
    (ours_out * et.from_numpy(w)).sum().backward()
    grads = torch.autograd.grad((theirs_out * torch.from_numpy(w)).sum(), theirs_in)
    for k, (o, g) in enumerate(zip(ours_in, grads)):
        close(o.grad, g, tol, f"grad {k} of {what}")


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("kind", ["well", "bad"])
def test_inv_det_slogdet_solve(dtype, kind):
    rng = np.random.default_rng(0)
    tol = TOL[(dtype, kind)]
    gtol = tol * (5 if kind == "well" else COND[kind] * (1 if dtype == "fp64" else 1e-3))
    for shape in ([3, 3], [2, 4, 4], [1, 5, 5]):
        a = conditioned(rng, shape, COND[kind], dtype)
        (oa,), (ta,) = both([a])
        close(et.linalg.inv(oa), torch.linalg.inv(ta), tol * COND[kind], f"inv {shape}")
        check_grads(rng, et.linalg.inv(oa), torch.linalg.inv(ta), [oa], [ta], gtol * COND[kind], f"inv {shape}")
        (oa,), (ta,) = both([a])
        close(et.linalg.det(oa), torch.linalg.det(ta), tol, f"det {shape}")
        check_grads(rng, et.linalg.det(oa), torch.linalg.det(ta), [oa], [ta], gtol, f"det {shape}")
        (oa,), (ta,) = both([a])
        sign, logabs = et.linalg.slogdet(oa)
        tsign, tlog = torch.linalg.slogdet(ta)
        close(sign, tsign, 0, f"slogdet sign {shape}")
        close(logabs, tlog, tol, f"slogdet {shape}")
        check_grads(rng, logabs, tlog, [oa], [ta], gtol * COND[kind], f"slogdet {shape}")
        for bshape, left in ((shape[:-1] + [2], True), (shape[:-1], True), (shape[:-2] + [2, shape[-1]], False)):
            b = rng.standard_normal(bshape).astype(NP[dtype])
            (oa, ob), (ta, tb) = both([a, b])
            got, ref = et.linalg.solve(oa, ob, left=left), torch.linalg.solve(ta, tb, left=left)
            close(got, ref, tol * COND[kind], f"solve {shape} {bshape} left={left}")
            check_grads(rng, got, ref, [oa, ob], [ta, tb], gtol * COND[kind], f"solve {shape} {bshape}")


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_cholesky_and_triangular_solves(dtype):
    rng = np.random.default_rng(1)
    tol = TOL[(dtype, "well")]
    for shape in ([4, 4], [2, 3, 3]):
        a = spd(rng, shape, dtype)
        for upper in (False, True):
            (oa,), (ta,) = both([a])
            got, ref = et.linalg.cholesky(oa, upper=upper), torch.linalg.cholesky(ta, upper=upper)
            close(got, ref, tol, f"cholesky {shape} upper={upper}")
            check_grads(rng, got, ref, [oa], [ta], tol * 10, f"cholesky {shape} upper={upper}")
        l = np.linalg.cholesky(a.astype(np.float64)).astype(NP[dtype])
        for upper, left, unit in ((False, True, False), (True, True, False), (False, False, True), (True, False, True)):
            t = np.swapaxes(l, -1, -2).copy() if upper else l
            bshape = shape[:-1] + [2] if left else shape[:-2] + [2, shape[-1]]
            b = rng.standard_normal(bshape).astype(NP[dtype])
            (ot, ob), (tt, tb) = both([t, b])
            got = et.linalg.solve_triangular(ot, ob, upper=upper, left=left, unitriangular=unit)
            ref = torch.linalg.solve_triangular(tt, tb, upper=upper, left=left, unitriangular=unit)
            what = f"solve_triangular {shape} upper={upper} left={left} unit={unit}"
            close(got, ref, tol * 10, what)
            check_grads(rng, got, ref, [ot, ob], [tt, tb], tol * 100, what)


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_eigh_by_its_properties_and_gauge_invariant_gradients(dtype):
    rng = np.random.default_rng(2)
    tol = TOL[(dtype, "well")]
    for shape, uplo in (([4, 4], "L"), ([2, 5, 5], "U")):
        x = rng.standard_normal(shape)
        a = ((x + np.swapaxes(x, -1, -2)) / 2).astype(NP[dtype])
        (oa,), (ta,) = both([a])
        lam, vec = et.linalg.eigh(oa, UPLO=uplo)
        tlam, tvec = torch.linalg.eigh(ta, UPLO=uplo)
        close(lam, tlam, tol, "eigenvalues")
        close(et.linalg.eigvalsh(oa, UPLO=uplo), tlam, tol, "eigvalsh")
        v, l = vec.numpy().astype(np.float64), lam.numpy().astype(np.float64)
        eye = np.broadcast_to(np.eye(shape[-1]), v.shape)
        np.testing.assert_allclose(np.swapaxes(v, -1, -2) @ v, eye, atol=tol * 10)
        np.testing.assert_allclose((v * l[..., None, :]) @ np.swapaxes(v, -1, -2), a, atol=tol * 10 * np.abs(a).max())
        # A gauge-invariant loss of both outputs: sum(w ⊙ V diag(λ³) Vᵀ) + sum(u ⊙ λ).
        w = rng.standard_normal(shape).astype(NP[dtype])
        u = rng.standard_normal(shape[:-1]).astype(NP[dtype])
        ours_loss = ((vec * (lam * lam * lam).unsqueeze(-2)).matmul(vec.transpose(-2, -1)) * et.from_numpy(w)).sum() + (lam * et.from_numpy(u)).sum()
        theirs_loss = ((tvec * (tlam ** 3).unsqueeze(-2)) @ tvec.transpose(-2, -1) * torch.from_numpy(w)).sum() + (tlam * torch.from_numpy(u)).sum()
        ours_loss.backward()
        (g,) = torch.autograd.grad(theirs_loss, [ta])
        close(oa.grad, g, tol * 100, f"eigh grad {shape}")
        (oa2,), (ta2,) = both([a])
        check_grads(rng, et.linalg.eigvalsh(oa2, UPLO=uplo), torch.linalg.eigvalsh(ta2, UPLO=uplo), [oa2], [ta2], tol * 10, "eigvalsh")


def refused(code, words, f):
    with pytest.raises(et.EnkaiError) as e:
        f()
    assert e.value.code == code and all(w in str(e.value) for w in words), str(e.value)


def test_singular_and_indefinite_inputs_are_e_linalg_with_the_batch_element():
    sing = np.zeros((2, 3, 3))
    sing[0] = np.eye(3)
    sing[1] = [[1, 2, 3], [2, 4, 6], [0, 0, 1]]
    refused("E_LINALG", ["linalg.inv", "(Batch element 1)", "singular"], lambda: et.linalg.inv(et.from_numpy(sing)))
    refused("E_LINALG", ["linalg.solve", "(Batch element 1)", "singular"], lambda: et.linalg.solve(et.from_numpy(sing), et.ones([3, 1], dtype="fp64")))
    indef = np.array([[1.0, 2.0], [2.0, 1.0]])
    refused("E_LINALG", ["linalg.cholesky", "positive-definite", "order 2"], lambda: et.linalg.cholesky(et.from_numpy(indef)))
    # A singular matrix still has a determinant (0) and a slogdet (0, -inf), as in PyTorch.
    assert et.linalg.det(et.from_numpy(sing[1])).item() == 0
    sign, logabs = et.linalg.slogdet(et.from_numpy(sing[1]))
    assert sign.item() == 0 and logabs.item() == -np.inf


def test_shapes_and_dtypes_are_refused_as_pytorch_refuses_them():
    refused("E_SHAPE", ["linalg.inv"], lambda: et.linalg.inv(et.ones([2, 3])))
    refused("E_SHAPE", ["linalg.cholesky"], lambda: et.linalg.cholesky(et.ones([3])))
    refused("E_DTYPE", ["linalg.inv"], lambda: et.linalg.inv(et.ones([2, 2], dtype="fp16")))
    refused("E_DTYPE", ["linalg.inv"], lambda: et.linalg.inv(et.ones([2, 2], dtype="int64")))
    refused("E_SHAPE", ["linalg.solve"], lambda: et.linalg.solve(et.ones([3, 3]), et.ones([4, 2])))


def sizes(shape):
    return shape[-2], shape[-1], min(shape[-2], shape[-1])


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_svd_by_its_properties_and_gauge_invariant_gradients(dtype):
    rng = np.random.default_rng(3)
    tol = TOL[(dtype, "well")]
    for shape in ([4, 3], [3, 5], [4, 4], [2, 4, 3], [2, 3, 5]):
        m, n, k = sizes(shape)
        a = rng.standard_normal(shape).astype(NP[dtype])
        for full in (False, True):
            (oa,), (ta,) = both([a])
            u, s, vh = et.linalg.svd(oa, full_matrices=full)
            tu, ts, tvh = torch.linalg.svd(ta, full_matrices=full)
            assert tuple(u.shape) == tuple(tu.shape) and tuple(vh.shape) == tuple(tvh.shape), (shape, full)
            close(s, ts, tol, f"singular values {shape}")
            un, sn, vn = (t.numpy().astype(np.float64) for t in (u, s, vh))
            np.testing.assert_allclose((un[..., :k] * sn[..., None, :]) @ vn[..., :k, :], a, atol=tol * 10 * np.abs(a).max())
            np.testing.assert_allclose(np.swapaxes(un, -1, -2) @ un, np.broadcast_to(np.eye(un.shape[-1]), un.shape[:-2] + (un.shape[-1],) * 2), atol=tol * 10)
            np.testing.assert_allclose(vn @ np.swapaxes(vn, -1, -2), np.broadcast_to(np.eye(vn.shape[-2]), vn.shape[:-2] + (vn.shape[-2],) * 2), atol=tol * 10)
            # sum(w ⊙ U_k diag(S³) Vh_k) + sum(c ⊙ S): invariant under the sign of each singular pair.
            w = rng.standard_normal(shape).astype(NP[dtype])
            c = rng.standard_normal(shape[:-2] + [k]).astype(NP[dtype])
            ours = ((u.narrow(-1, 0, k) * (s * s * s).unsqueeze(-2)).matmul(vh.narrow(-2, 0, k)) * et.from_numpy(w)).sum() + (s * et.from_numpy(c)).sum()
            theirs = ((tu[..., :k] * (ts**3).unsqueeze(-2)) @ tvh[..., :k, :] * torch.from_numpy(w)).sum() + (ts * torch.from_numpy(c)).sum()
            ours.backward()
            (g,) = torch.autograd.grad(theirs, [ta])
            close(oa.grad, g, tol * 100, f"svd grad {shape} full={full}")
        (oa,), (ta,) = both([a])
        check_grads(rng, et.linalg.svdvals(oa), torch.linalg.svdvals(ta), [oa], [ta], tol * 10, f"svdvals {shape}")


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_qr_by_its_properties_and_gauge_invariant_gradients(dtype):
    rng = np.random.default_rng(4)
    tol = TOL[(dtype, "well")]
    for shape in ([5, 3], [3, 5], [4, 4], [2, 4, 3]):
        m, n, k = sizes(shape)
        a = rng.standard_normal(shape).astype(NP[dtype])
        for mode in ("reduced", "complete", "r"):
            (oa,), (ta,) = both([a])
            q, r = et.linalg.qr(oa, mode=mode)
            tq, tr = torch.linalg.qr(ta, mode=mode)
            assert tuple(q.shape) == tuple(tq.shape) and tuple(r.shape) == tuple(tr.shape), (shape, mode)
            rn = r.numpy().astype(np.float64)
            np.testing.assert_array_equal(np.tril(rn, -1), 0)
            # Unique up to the signs of R's diagonal: compare D R (and Q D), D = sign(diag R).
            d = np.sign(np.diagonal(rn, axis1=-2, axis2=-1))[..., :k]
            td = np.sign(np.diagonal(tr.detach().numpy(), axis1=-2, axis2=-1))[..., :k]
            np.testing.assert_allclose(d[..., :, None] * rn[..., :k, :], td[..., :, None] * tr.detach().numpy()[..., :k, :], atol=tol * 10 * np.abs(a).max())
            if mode == "r":
                continue
            qn = q.numpy().astype(np.float64)
            np.testing.assert_allclose(qn @ rn, a, atol=tol * 10 * np.abs(a).max())
            np.testing.assert_allclose(np.swapaxes(qn, -1, -2) @ qn, np.broadcast_to(np.eye(qn.shape[-1]), qn.shape[:-2] + (qn.shape[-1],) * 2), atol=tol * 10)
            np.testing.assert_allclose(qn[..., :k] * d[..., None, :], tq.detach().numpy()[..., :k] * td[..., None, :], atol=tol * 10)
            if mode == "complete" and m > n:
                continue  # not differentiable, in PyTorch as here
            w = rng.standard_normal(tuple(tq[..., :k].shape)).astype(NP[dtype])
            c = rng.standard_normal(tuple(tr[..., :k, :].shape)).astype(NP[dtype])
            ours = (q.narrow(-1, 0, k) * et.from_numpy((w * d[..., None, :]).astype(NP[dtype]))).sum() + (r.narrow(-2, 0, k) * et.from_numpy((c * d[..., :, None]).astype(NP[dtype]))).sum()
            theirs = (tq[..., :k] * torch.from_numpy((w * td[..., None, :]).astype(NP[dtype]))).sum() + (tr[..., :k, :] * torch.from_numpy((c * td[..., :, None]).astype(NP[dtype]))).sum()
            ours.backward()
            (g,) = torch.autograd.grad(theirs, [ta])
            close(oa.grad, g, tol * 100, f"qr grad {shape} {mode}")


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_pinv_and_lstsq(dtype):
    rng = np.random.default_rng(5)
    tol = TOL[(dtype, "well")]
    for shape in ([4, 3], [3, 5], [2, 4, 4]):
        a = conditioned(rng, shape[:-1] + [shape[-2]], 10.0, dtype)[..., : shape[-1]] if shape[-1] <= shape[-2] else rng.standard_normal(shape).astype(NP[dtype])
        (oa,), (ta,) = both([a])
        got, ref = et.linalg.pinv(oa), torch.linalg.pinv(ta)
        close(got, ref, tol * 10, f"pinv {shape}")
        check_grads(rng, got, ref, [oa], [ta], tol * 100, f"pinv {shape}")
    # Rank 2 of 4: the cut-off drops the rest, in values and gradients.
    low = (rng.standard_normal((5, 2)) @ rng.standard_normal((2, 4))).astype(NP[dtype])
    (oa,), (ta,) = both([low])
    got, ref = et.linalg.pinv(oa, rtol=1e-3), torch.linalg.pinv(ta, rtol=1e-3)
    close(got, ref, tol * 10, "pinv rank 2")
    check_grads(rng, got, ref, [oa], [ta], tol * 100, "pinv rank 2")
    x = rng.standard_normal((4, 4))
    sym = (x + x.T).astype(NP[dtype])
    (oa,), (ta,) = both([sym])
    got, ref = et.linalg.pinv(oa, hermitian=True, atol=0.1), torch.linalg.pinv(ta, hermitian=True, atol=0.1)
    close(got, ref, tol * 10, "pinv hermitian")
    check_grads(rng, got, ref, [oa], [ta], tol * 100, "pinv hermitian")

    for ashape, bshape in (([6, 3], [6, 2]), ([3, 5], [3, 2]), ([6, 3], [6]), ([2, 6, 3], [2, 6, 1]), ([2, 6, 3], [2, 6])):
        a = rng.standard_normal(ashape).astype(NP[dtype])
        b = rng.standard_normal(bshape).astype(NP[dtype])
        for driver in (None, "gelsy", "gelsd", "gelss", "gels"):
            if driver == "gels" and ashape[-2] < ashape[-1]:
                continue  # gels does not give the minimum-norm solution of an underdetermined system
            kw = {} if driver is None else {"driver": driver}
            (oa, ob), (ta, tb) = both([a, b])
            got, ref = et.linalg.lstsq(oa, ob, **kw), torch.linalg.lstsq(ta, tb, **kw)
            what = f"lstsq {ashape} {bshape} {driver}"
            for name, g, r in zip(("solution", "residuals", "rank", "singular_values"), got, ref):
                assert tuple(g.shape) == tuple(r.shape), f"{what}: {name} {tuple(g.shape)} vs {tuple(r.shape)}"
                if name == "rank" and r.numel():
                    np.testing.assert_array_equal(g.numpy(), r.numpy())
                elif r.numel():
                    close(g, r, tol * 10, f"{what}: {name}")
            check_grads(rng, got[0], ref[0], [oa, ob], [ta, tb], tol * 100, what)


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_matrix_norm_every_order(dtype):
    rng = np.random.default_rng(6)
    tol = TOL[(dtype, "well")]
    for shape, dim in (([4, 3], [-2, -1]), ([2, 3, 5], [-2, -1]), ([3, 2, 4], [0, 2]), ([3, 2, 4], [2, 0])):
        a = rng.standard_normal(shape).astype(NP[dtype])
        for ord in ("fro", "nuc", 2, -2, 1, -1, float("inf"), float("-inf")):
            for keepdim in (False, True):
                (oa,), (ta,) = both([a])
                got = et.linalg.matrix_norm(oa, ord=ord, dim=dim, keepdim=keepdim)
                ref = torch.linalg.matrix_norm(ta, ord=ord, dim=dim, keepdim=keepdim)
                what = f"matrix_norm {shape} ord={ord} dim={dim} keepdim={keepdim}"
                close(got, ref, tol, what)
                check_grads(rng, got, ref, [oa], [ta], tol * 10, what)
    (oa,), (ta,) = both([rng.standard_normal((3, 4)).astype(NP[dtype])])
    close(et.linalg.matrix_norm(oa), torch.linalg.matrix_norm(ta), tol, "default ord")


def test_matrix_norm_in_half_precision():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((2, 5, 6)).astype(np.float32)
    for dt, tdt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        for ord in ("fro", 1, float("inf")):
            got = et.linalg.matrix_norm(et.from_numpy(a).to_dtype(dt), ord=ord)
            ref = torch.linalg.matrix_norm(torch.from_numpy(a).to(tdt), ord=ord)
            assert got.dtype == dt
            np.testing.assert_array_equal(got.to_dtype("fp32").numpy(), ref.float().numpy(), err_msg=f"{dt} {ord}")
        refused("E_DTYPE", ["linalg.matrix_norm"], lambda: et.linalg.matrix_norm(et.from_numpy(a).to_dtype(dt), ord="nuc"))


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_matrix_exp(dtype):
    rng = np.random.default_rng(8)
    tol = TOL[(dtype, "well")]
    for shape, scale in (([3, 3], 0.1), ([2, 4, 4], 1.0), ([5, 5], 6.0)):
        a = (rng.standard_normal(shape) * scale).astype(NP[dtype])
        (oa,), (ta,) = both([a])
        got, ref = et.linalg.matrix_exp(oa), torch.linalg.matrix_exp(ta)
        close(got, ref, tol * 10, f"matrix_exp {shape} x{scale}")
        check_grads(rng, got, ref, [oa], [ta], tol * 100, f"matrix_exp {shape} x{scale}")


def test_spectral_refusals_as_pytorch():
    refused("E_INVALID_ARG", ["linalg.qr", "mode"], lambda: et.linalg.qr(et.ones([3, 2]), mode="full"))
    refused("E_INVALID_ARG", ["linalg.matrix_norm", "Order"], lambda: et.linalg.matrix_norm(et.ones([3, 2]), ord=3))
    refused("E_INVALID_ARG", ["linalg.lstsq", "driver"], lambda: et.linalg.lstsq(et.ones([3, 2]), et.ones([3, 1]), driver="gesv"))
    refused("E_SHAPE", ["linalg.lstsq"], lambda: et.linalg.lstsq(et.ones([3, 2]), et.ones([4, 1])))
    refused("E_SHAPE", ["linalg.matrix_exp"], lambda: et.linalg.matrix_exp(et.ones([3, 2])))
    refused("E_DTYPE", ["linalg.svd"], lambda: et.linalg.svd(et.ones([3, 2], dtype="int64")))
    # Q is not computed in mode 'r', so R has no gradient; complete mode of a tall matrix neither.
    for mode, shape in (("r", [3, 2]), ("complete", [3, 2])):
        a = et.ones(shape)
        a.require_grad()
        with pytest.raises(et.EnkaiError) as e:
            et.linalg.qr(a, mode=mode)[1].sum().backward()
        assert "linalg.qr" in str(e.value) or "qr" in str(e.value).lower(), str(e.value)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_inputs_end_in_a_value_or_e_linalg(bad):
    """No factorization loops on NaN or inf: each returns (NaN/inf values, as
    LAPACK may) or refuses with E_LINALG, as PyTorch does for some of them."""
    a = np.eye(4) + 0.1
    a[1, 2] = bad
    calls = {
        "svd": lambda t: et.linalg.svd(t),
        "svdvals": lambda t: et.linalg.svdvals(t),
        "eigh": lambda t: et.linalg.eigh(t),
        "qr": lambda t: et.linalg.qr(t),
        "pinv": lambda t: et.linalg.pinv(t),
        "lstsq": lambda t: et.linalg.lstsq(t, et.ones([4, 1], dtype="fp64")),
        "matrix_norm nuc": lambda t: et.linalg.matrix_norm(t, ord="nuc"),
        "matrix_exp": lambda t: et.linalg.matrix_exp(t),
        "det": lambda t: et.linalg.det(t),
        "cholesky": lambda t: et.linalg.cholesky(t),
    }
    for name, f in calls.items():
        try:
            f(et.from_numpy(a))
        except et.EnkaiError as e:
            # libtorch's lstsq fails an internal assert on NaN (E_TORCH): still an error, not a crash.
            assert e.code in ("E_LINALG", "E_TORCH"), f"{name}: {e}"


def test_matrix_exp_in_half_precision_rounds_once(backend):
    """PyTorch's CPU matrix_exp takes fp16/bf16, and computes in them: its
    fp16 result overflows to inf/nan even for a matrix of norm 1 (PyTorch
    2.13), and the torch backend returns that. The native one computes in
    fp64 and rounds once, so it is within one unit of the last place of the
    fp64 result."""
    rng = np.random.default_rng(9)
    a = (rng.standard_normal((2, 4, 4)) * 0.5).astype(np.float32)
    for dt, tdt, ulp in (("fp16", torch.float16, 2.0**-10), ("bf16", torch.bfloat16, 2.0**-7)):
        x = torch.from_numpy(a).to(tdt)
        exact = torch.linalg.matrix_exp(x.double()).numpy()
        got = et.linalg.matrix_exp(et.from_numpy(a).to_dtype(dt))
        assert got.dtype == dt
        ours = got.to_dtype("fp64").numpy()
        if backend == "torch":
            np.testing.assert_array_equal(ours, torch.linalg.matrix_exp(x).double().numpy())
        else:
            np.testing.assert_allclose(ours, exact, rtol=ulp, atol=ulp * 2.0**-4)
