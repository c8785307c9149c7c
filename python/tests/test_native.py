"""The native (cpu) backend against PyTorch where test_ops.py does not reach:
every dtype and type promotion, casts between all dtypes, views sharing
storage, copies between backends, and ENKAI_BACKEND. Each test runs on both
backends (the torch one is the control)."""

import os
import subprocess
import sys
import zlib

import pytest
import torch

import enkai_tensor as et
from helpers import DT, same, to_et, to_torch

pytestmark = pytest.mark.usefixtures("backend")
ALL = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8,
       torch.bool, torch.uint8]
OPS = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y, "div": lambda x, y: x / y}


def sample(dtype, shape):
    g = torch.Generator().manual_seed(zlib.crc32(repr((str(dtype), shape)).encode()))
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) < 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 3).to(dtype)
    lo = 0 if dtype == torch.uint8 else -100
    # Near the int limits too, so wrapping arithmetic is exercised.
    big = torch.iinfo(dtype).max // 3
    return torch.cat([torch.randint(lo, 100, shape[:-1] + (shape[-1] - 1,), generator=g, dtype=dtype),
                      torch.full(shape[:-1] + (1,), big, dtype=dtype)], -1)


def outcome(f):
    try:
        return f(), None
    except (RuntimeError, et.EnkaiError) as e:
        return None, e


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("da", ALL)
@pytest.mark.parametrize("db", ALL)
@pytest.mark.parametrize("b_dims", [(2, 3), ()], ids=["dim", "0dim"])
def test_binary_dtypes_and_promotion(name, da, db, b_dims):
    a, b = sample(da, (2, 3)), sample(db, b_dims or (1,)).reshape(b_dims)
    if name == "div" and not (da.is_floating_point or db.is_floating_point):
        b = torch.where(b == 0, torch.ones_like(b), b)  # integer x/0 is inf in torch: keep finite
    want, err = outcome(lambda: OPS[name](a, b))
    got, eerr = outcome(lambda: OPS[name](to_et(a), to_et(b)))
    if err is not None:
        assert eerr is not None and eerr.code == "E_DTYPE", (err, eerr)
        return
    assert eerr is None, eerr
    same(got, want)


@pytest.mark.parametrize("src", ALL)
@pytest.mark.parametrize("dst", ALL)
def test_to_dtype_every_pair(src, dst):
    x = sample(src, (3, 4))
    if src.is_floating_point and not dst.is_floating_point and dst != torch.bool:
        # float -> int out of range is undefined in C++: stay inside every int type.
        x = x.clamp(0 if dst == torch.uint8 else -100, 100)
    same(to_et(x).to_dtype(DT[dst]), x.to(dst))
    # non-contiguous source
    same(to_et(x).transpose(0, 1).to_dtype(DT[dst]), x.t().to(dst))


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", ["relu", "sigmoid", "tanh", "gelu", "sum", "mean", "softmax"])
def test_unary_and_reductions_per_dtype(op, dtype):
    x = sample(dtype, (3, 5))
    f_t = {"relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "gelu": torch.nn.functional.gelu,
           "sum": lambda t: t.sum(0), "mean": lambda t: t.mean(1, keepdim=True), "softmax": lambda t: t.softmax(0)}[op]
    f_e = {"relu": lambda e: e.relu(), "sigmoid": lambda e: e.sigmoid(), "tanh": lambda e: e.tanh(),
           "gelu": lambda e: e.gelu(), "sum": lambda e: e.sum(0), "mean": lambda e: e.mean(1, True),
           "softmax": lambda e: e.softmax(0)}[op]
    want, err = outcome(lambda: f_t(x))
    got, eerr = outcome(lambda: f_e(to_et(x)))
    if err is not None:
        assert eerr is not None and eerr.code == "E_DTYPE", (err, eerr)
        return
    assert eerr is None, eerr
    # gelu: 1 + erf cancels for x << 0, and torch's f32 erf is an approximation.
    same(got, want, kind="elementwise" if op in ("relu", "sigmoid", "tanh") else "reduce")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.bool])
def test_views_share_storage_like_pytorch(dtype):
    base = torch.arange(24).reshape(2, 3, 4).to(dtype) if dtype != torch.bool else torch.rand(2, 3, 4) < 0.5
    for make_e, make_t in [(lambda e: e.reshape(6, 4), lambda t: t.reshape(6, 4)),
                           (lambda e: e.transpose(0, 2), lambda t: t.transpose(0, 2)),
                           (lambda e: e.slice(2, 1, 4, 2), lambda t: t[:, :, 1:4:2]),
                           (lambda e: e.transpose(0, 2).reshape(-1), lambda t: t.transpose(0, 2).reshape(-1))]:
        e = to_et(base)
        v, vt = make_e(e), make_t(base.clone())
        same(v, vt)
        # DLPack shows the storage: a view shares its base's bytes exactly when torch's does.
        pv, pb = torch.from_dlpack(v).data_ptr(), torch.from_dlpack(e).data_ptr()
        shares = pb <= pv < pb + base.numel() * base.element_size()
        assert shares == (vt._base is not None)


def test_view_of_a_non_viewable_layout_copies():
    x = torch.randn(3, 4)
    e = to_et(x).transpose(0, 1)
    same(e.view(12), x.t().reshape(12))


def test_grads_through_views_and_mixed_dtypes():
    a, b = torch.randn(3, 4, dtype=torch.float64), torch.randn(4, 3)
    ta, tb = a.clone().requires_grad_(), b.clone().requires_grad_()
    ea, eb = to_et(a).require_grad(), to_et(b).require_grad()
    (ta.t()[1:3] * tb[1:3] + tb.reshape(3, 4).t()[::2].sum()).sum().backward()
    (ea.transpose(0, 1).slice(0, 1, 3) * eb.slice(0, 1, 3) + eb.reshape(3, 4).transpose(0, 1).slice(0, 0, 4, 2).sum()).sum().backward()
    same(ea.grad, ta.grad)
    same(eb.grad, tb.grad)


def test_to_backend_copies_values_and_not_history():
    x = torch.randn(2, 3)
    e = to_et(x).require_grad()
    for name in et.backend_list():
        c = e.to_backend(name)
        same(c, x)
        assert c.grad is None
    before = et.backend_current()
    if "torch" in et.backend_list():
        other = "torch" if before == "cpu" else "cpu"
        c = e.to_backend(other)
        with pytest.raises(et.EnkaiError) as ex:
            e + c
        assert ex.value.code == "E_BACKEND_MISMATCH"
    with pytest.raises(et.EnkaiError) as ex:
        e.to_backend("tpu")
    assert ex.value.code == "E_BACKEND_UNKNOWN"


def test_enkai_backend_picks_the_default_at_load(backend):
    env0 = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(et.__file__)))
    code = "import enkai_tensor as et; print(et.backend_current(), et.randn([2]).shape)"
    for env, want in [("cpu", "cpu (2,)"), ("torch", "torch (2,)")]:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                             env=dict(env0, ENKAI_BACKEND=env))
        assert out.stdout.strip() == want, out.stderr
    out = subprocess.run([sys.executable, "-c", "import enkai_tensor as et; et.randn([2])"], capture_output=True,
                         text=True, timeout=60, env=dict(env0, ENKAI_BACKEND="tpu"))
    assert "E_BACKEND_UNKNOWN" in out.stderr and "ENKAI_BACKEND" in out.stderr


def test_backward_through_a_long_chain_does_not_overflow_the_stack():
    x = et.ones([2]).require_grad()
    y = x
    for _ in range(20000):
        y = y + 1.0
    y.sum().backward()
    same(x.grad, torch.ones(2))
    del y  # a recursive drop of 20,000 nodes would overflow here


SIMD_PROGRAM = r"""
import hashlib, sys
import enkai_tensor as et
et.backend_set("cpu")
et.manual_seed(5)
h = hashlib.sha256()
x, w, b = et.randn([37, 301]), et.randn([301]), et.randn([301])
t = et.from_bytes(bytes(8 * 37), [37], "int64")
m = et.from_bytes(bytes([i % 3 == 0 for i in range(37 * 301)]), [37, 301], "bool")
x.require_grad(); w.require_grad()
outs = [x.softmax(-1), et.masked_softmax(x, m, 1), et.layernorm(x, w, b), x.gelu(), et.cross_entropy(x, t), x.sum(0)]
loss = sum(((o * o).sum() if o.shape else o) for o in outs)
loss.backward()
opt = et.AdamW([x, w], lr=0.01, weight_decay=0.1)
opt.step()
for o in outs + [x.grad, w.grad, x, w]:
    h.update(o.to_bytes())
print(h.hexdigest())
"""


def test_every_simd_level_gives_the_same_bits():
    """The multiversioned kernels run the same operations in the same order at
    every level (ENKAI_SIMD caps it): the results agree bit for bit."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    digests = set()
    for level in ("baseline", "avx2", "avx512"):
        env = dict(os.environ, ENKAI_SIMD=level, PYTHONPATH=str(root / "python"))
        r = subprocess.run([sys.executable, "-c", SIMD_PROGRAM], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        digests.add(r.stdout.strip())
    assert len(digests) == 1, digests
