"""The op table's rows without oracle values (domain `own`): random sampling
and `empty`. Against PyTorch: result dtypes, shapes and refusals, over the
rows' own cases. Then, per op: values in range, frequencies within a
chi-square bound (fixed seed, generous bound), and reproducibility for a
seed. Equality with PyTorch's values for a seed is test_rng.py's.
Also the factories' edge cases that JSON cases cannot spell (Infinity, NaN).
"""

import numpy as np
import pytest
import torch

import enkai_tensor as et
from test_op_table import DTYPES, SCHEMA, build_input, call_aten, fits, refusal, results

pytestmark = pytest.mark.usefixtures("backend")

OWN = sorted({o["name"] for o in SCHEMA if o["domain"] == "own"})
# Result dtypes by torch dtype: the inputs' dtypes and the complex results of complex and fft ops.
NAMES = {**{v: k for k, v in DTYPES.items()}, torch.complex64: "complex64", torch.complex128: "complex128"}


def deliberate_refusal(name, dtype, case):
    """Where we refuse what PyTorch lets through, as the README documents:
    complex32 is not a dtype here, and torch.linalg's functions take fp32
    and fp64 only. PyTorch's CPU kernels
    return an empty fp16/bf16 result for an empty input to some (cholesky,
    svd) before their dtype check, and refuse it in others (inv)."""
    if name in ("view_as_complex", "complex", "polar") and dtype == "fp16":
        return True  # PyTorch's complex32 (ComplexHalf): not a dtype here
    return name.startswith("linalg.") and name not in ("linalg.matrix_norm", "linalg.matrix_exp") and dtype in ("fp16", "bf16") \
        and any(0 in s for s in case["inputs"])


@pytest.mark.parametrize("name", OWN)
def test_own_cases_match_torch_in_dtype_shape_and_refusals(name, backend):
    rng = np.random.default_rng(5)
    checked = 0
    for ov in [o for o in SCHEMA if o["name"] == name and backend in o["backends"]]:
        for case in [c for c in ov["cases"] if fits(ov, c)]:
            kw = case.get("kwargs", {})
            for dtype in DTYPES:
                built = [build_input(rng, s, dtype, "any", "contiguous") for s in case["inputs"]]
                ours_in, torch_in = [b[0] for b in built], [b[1] for b in built]
                what = f"{ov['overload']} {dtype} {case}"
                ref, err = refusal(lambda: call_aten(ov, torch_in, kw))
                if err is None and deliberate_refusal(name, dtype, case):
                    with pytest.raises(et.EnkaiError) as e:
                        et.op(name, *ours_in, **kw)
                    assert e.value.code == "E_DTYPE", f"{what}: {e.value}"
                    continue
                if err is not None:
                    with pytest.raises(et.EnkaiError) as e:
                        et.op(name, *ours_in, **kw)
                    assert e.value.code in ("E_DTYPE", "E_TORCH", "E_SHAPE", "E_INVALID_ARG", "E_LINALG"), f"{what}: {e.value}"
                    checked += 1  # a refusal that matches is a case checked (imag of a real tensor has only these)
                    continue
                for g, r in zip(results(et.op(name, *ours_in, **kw)), results(ref)):
                    assert g.dtype == NAMES[r.dtype], what
                    assert tuple(g.shape) == tuple(r.shape), what
                checked += 1
    assert checked > 0


def chi2_ok(counts, probs):
    """Pearson's chi-square far below its tail: 5 sigma above the mean (df + 5 sqrt(2 df))."""
    counts, probs = np.asarray(counts, float), np.asarray(probs, float)
    n = counts.sum()
    keep = probs > 0
    assert counts[~keep].sum() == 0, "a zero-probability outcome was drawn"
    exp = n * probs[keep]
    stat = ((counts[keep] - exp) ** 2 / exp).sum()
    df = keep.sum() - 1
    return stat < df + 5 * np.sqrt(2 * df)


def seeded(fn, seed=1234):
    et.manual_seed(seed)
    return fn()


def test_rand(backend):
    for dt in ("fp32", "fp64", "fp16", "bf16"):
        x = seeded(lambda: et.op("rand", size=[20000], dtype=dt)).to_dtype("fp64").numpy()
        assert x.min() >= 0 and x.max() < 1, dt
        counts = np.histogram(x, bins=10, range=(0, 1))[0]
        if dt in ("fp32", "fp64"):  # fp16/bf16 round into uneven bins
            assert chi2_ok(counts, [0.1] * 10), (dt, counts)
        y = seeded(lambda: et.op("rand", size=[20000], dtype=dt)).to_dtype("fp64").numpy()
        np.testing.assert_array_equal(x, y)
    assert et.op("rand", size=[]).shape == ()


def test_randint(backend):
    x = seeded(lambda: et.op("randint", low=-3, high=4, size=[70000])).numpy()
    assert x.dtype == np.int64 and x.min() >= -3 and x.max() <= 3
    assert chi2_ok(np.bincount(x + 3, minlength=7), [1 / 7] * 7)
    np.testing.assert_array_equal(x, seeded(lambda: et.op("randint", low=-3, high=4, size=[70000])).numpy())
    for dt, (lo, hi) in {"uint8": (0, 256), "bool": (0, 2), "int32": (-(2**31), 2**31 - 1), "fp16": (0, 100)}.items():
        v = et.op("randint", low=lo, high=hi, size=[4000], dtype=dt).to_dtype("fp64").numpy()
        assert v.min() >= lo and v.max() < hi and len(np.unique(v)) > 1, dt
    big = et.op("randint", low=-(2**62), high=2**62, size=[1000]).numpy()
    assert (big < 0).any() and (big > 2**60).any()


def test_randn_like(backend):
    x = et.zeros([100, 100], dtype="fp64")
    a = seeded(lambda: et.op("randn_like", x)).numpy()
    assert a.dtype == np.float64 and abs(a.mean()) < 0.05 and abs(a.std() - 1) < 0.05
    np.testing.assert_array_equal(a, seeded(lambda: et.op("randn_like", x)).numpy())
    assert et.op("randn_like", et.tensor([1, 2]), dtype="bf16").dtype == "bf16"


def test_bernoulli(backend):
    p = np.array([0.0, 0.2, 0.5, 0.9, 1.0])
    probs = et.from_numpy(np.tile(p, (4000, 1)))
    x = seeded(lambda: et.op("bernoulli", probs)).numpy()
    assert set(np.unique(x)) <= {0.0, 1.0}
    assert (x[:, 0] == 0).all() and (x[:, 4] == 1).all()
    np.testing.assert_allclose(x.mean(0), p, atol=0.03)
    np.testing.assert_array_equal(x, seeded(lambda: et.op("bernoulli", probs)).numpy())
    for dt in ("int64", "bool", "uint8", "fp16"):
        y = et.op("bernoulli", et.zeros([4000], dtype=dt), p=0.25)
        assert y.dtype == dt and abs(y.to_dtype("fp64").numpy().mean() - 0.25) < 0.03
    for bad in ([1.5], [float("nan")], [-0.1]):
        with pytest.raises(et.EnkaiError):
            et.op("bernoulli", et.tensor(bad))
    with pytest.raises(et.EnkaiError):
        et.op("bernoulli", et.tensor([0.5]), p=float("nan"))


def test_multinomial(backend):
    p = np.array([[0.1, 0.0, 0.3, 0.6], [1.0, 1.0, 1.0, 1.0]])
    probs = et.from_numpy(p)
    x = seeded(lambda: et.op("multinomial", probs, num_samples=20000, replacement=True)).numpy()
    assert x.shape == (2, 20000) and x.dtype == np.int64
    for row, pr in zip(x, p):
        assert chi2_ok(np.bincount(row, minlength=4), pr / pr.sum())
    np.testing.assert_array_equal(x, seeded(lambda: et.op("multinomial", probs, num_samples=20000, replacement=True)).numpy())
    # Without replacement: distinct categories; the first draw follows p.
    firsts = []
    for i in range(3000):
        d = et.op("multinomial", probs, num_samples=3).numpy()
        assert all(len(set(r)) == 3 for r in d) and 1 not in d[0]
        firsts.append(d[0, 0])
    assert chi2_ok(np.bincount(firsts, minlength=4), p[0] / p[0].sum())
    # More samples than nonzero categories: the zero ones come last, as in PyTorch.
    d = et.op("multinomial", et.tensor([1.0, 0.0, 1.0]), num_samples=3).numpy()
    assert sorted(d) == [0, 1, 2] and d[2] == 1
    assert et.op("multinomial", et.zeros([0, 3]), num_samples=2).shape == (0, 2)
    for t, kw in [(et.tensor([1.0, -1.0]), {}), (et.tensor([0.0, 0.0]), {"replacement": True}), (et.tensor([1.0, float("inf")]), {}),
                  (et.zeros([2, 0]), {"replacement": True}), (et.tensor(1.0), {}), (et.tensor([1, 2]), {})]:
        with pytest.raises(et.EnkaiError):
            et.op("multinomial", t, num_samples=1, **kw)


def test_empty_and_huge_sizes(backend):
    assert et.op("empty", size=[3, 0, 2], dtype="bf16").shape == (3, 0, 2)
    for op, kw in [("empty", {"size": [2**40, 2**40]}), ("rand", {"size": [2**62, 4]}), ("randint", {"high": 5, "size": [2**31, 2**31, 4]}),
                   ("eye", {"n": 2**40, "m": 2**40}), ("arange", {"start": 0, "end": 1e300, "step": 1e-300})]:
        with pytest.raises(et.EnkaiError) as e:
            et.op(op, **kw)
        assert e.value.code in ("E_RESOURCE", "E_SHAPE", "E_INVALID_ARG", "E_TORCH"), (op, e.value)


def test_factory_edges_against_torch(backend):
    """Arguments JSON cases cannot hold (non-finite numbers), and a grid of arange and linspace arguments."""
    calls = [("arange", torch.ops.aten.arange.start, {"start": 0, "end": float("inf")}),
             ("arange", torch.ops.aten.arange.start, {"start": float("nan"), "end": 3})]
    for start in (-2, 0.5, 3):
        for end in (-4.25, 5, 7.5):
            for step in (1, -1.5, 0.7):
                for dt in (None, "int64", "int32", "fp32", "fp64", "fp16"):
                    kw = {"start": start, "end": end, "step": step} | ({"dtype": dt} if dt else {})
                    calls.append(("arange", torch.ops.aten.arange.start_step, kw))
    for start, end in ((-3, 10), (0.25, -7.5), (2, 2)):
        for steps in (0, 1, 2, 5, 100):
            for dt in (None, "int64", "uint8", "fp64", "bf16", "fp16"):
                calls.append(("linspace", torch.ops.aten.linspace.default, {"start": start, "end": end, "steps": steps} | ({"dtype": dt} if dt else {})))
    for name, fn, kw in calls:
        tkw = {k: DTYPES[v] if k == "dtype" else v for k, v in kw.items()}
        ref, err = refusal(lambda: fn(**tkw))
        if err is not None:
            with pytest.raises(et.EnkaiError):
                et.op(name, **kw)
            continue
        got = et.op(name, **kw)
        assert got.dtype == {v: k for k, v in DTYPES.items()}[ref.dtype] and tuple(got.shape) == tuple(ref.shape), (name, kw)
        g, r = got.to_dtype("fp64").numpy(), ref.double().numpy()
        np.testing.assert_allclose(g, r, rtol=2e-3 if got.dtype in ("fp16", "bf16") else 1e-6, atol=1e-6, err_msg=f"{name} {kw}")
    x = et.tensor([1.0, 2.0])
    for v in (float("nan"), float("-inf")):
        np.testing.assert_array_equal(et.op("full_like", x, fill_value=v).numpy(), torch.full_like(torch.tensor([1.0, 2.0]), v).numpy())
    with pytest.raises(et.EnkaiError):
        et.op("full_like", et.tensor([1, 2]), fill_value=float("nan"))
