"""Every op against PyTorch's Python API: outputs and input gradients."""

import math

import pytest
import torch
import torch.nn.functional as F

import enkai_tensor as et
from helpers import DT, same, to_et, to_torch

TORCH_DT = list(DT)

torch.manual_seed(0)
pytestmark = pytest.mark.usefixtures("backend")
FLOATS = [torch.float32, torch.float64, torch.bfloat16]
FLOAT_IDS = ["fp32", "fp64", "bf16"]


def check(f_et, f_torch, *inputs, grad=True, kind="elementwise", **tol):
    """Runs both sides on copies of `inputs`; compares outputs (tolerance class
    `kind` on the native backend, see helpers.NATIVE_TOL), then the gradients
    of sum(out * w) for a random w with respect to every float input (always
    the "reduce" class: a backward pass is a chain of ops and, with
    broadcasting, sums)."""
    ts = [t.detach().clone().requires_grad_(grad and t.is_floating_point()) for t in inputs]
    es = [to_et(t) for t in inputs]
    for e, t in zip(es, ts):
        if t.requires_grad:
            e.require_grad()
    out_t, out_e = f_torch(*ts), f_et(*es)
    same(out_e, out_t, kind=kind, **tol)
    if not (grad and out_t.requires_grad and out_t.numel()):
        return
    w = torch.randn(out_t.shape, dtype=out_t.dtype)
    (out_t * w).sum().backward()
    (out_e * to_et(w)).sum().backward()
    for e, t in zip(es, ts):
        if t.grad is None:
            assert not t.requires_grad or e.grad is None
        else:
            same(e.grad, t.grad, kind="reduce", **tol)


BROADCAST = [((3, 4), (3, 4)), ((2, 1, 4), (3, 1)), ((4,), ()), ((0, 3), (1, 3)), ((), ())]


@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize("sa,sb", BROADCAST)
@pytest.mark.parametrize("name", ["add", "sub", "mul", "div"])
def test_binary(name, sa, sb, dtype):
    a, b = torch.randn(sa, dtype=dtype), torch.randn(sb, dtype=dtype) + 3
    op = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y, "div": lambda x, y: x / y}[name]
    check(op, op, a, b)


def test_binary_promotes_like_torch():
    a, b = torch.arange(6).reshape(2, 3), torch.randn(3)
    check(lambda x, y: x + y, lambda x, y: x + y, a, b, grad=False)
    check(lambda x, y: x / y, lambda x, y: x / y, a, a + 1, grad=False)


@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize("sa,sb", [((2, 3), (3, 4)), ((5, 2, 3), (3, 4)), ((2, 1, 2, 3), (4, 3, 5)), ((3,), (3,)),
                                   ((3,), (3, 2)), ((2, 3), (3,)), ((0, 3), (3, 2)), ((2, 0), (0, 3))])
def test_matmul(sa, sb, dtype):
    # bf16 matmul accumulates in fp32 identically on both sides; zero tolerance holds.
    check(lambda a, b: a @ b, torch.matmul, torch.randn(sa, dtype=dtype), torch.randn(sb, dtype=dtype), kind="reduce")


@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
def test_unary(dtype):
    x = torch.randn(4, 5, dtype=dtype) * 3
    check(lambda e: e.relu(), torch.relu, x)
    check(lambda e: e.sigmoid(), torch.sigmoid, x)
    check(lambda e: e.tanh(), torch.tanh, x)
    # gelu is x/2*(1+erf(x/sqrt2)): near x = -3 the 1+erf cancels, so an erf a
    # few ulps off is far off relative to the result ("reduce" class)
    check(lambda e: e.gelu(), lambda t: F.gelu(t), x, kind="reduce")
    check(lambda e: e.gelu(), lambda t: F.gelu(t), torch.randn(0, 3, dtype=dtype), kind="reduce")


def test_shapes_ops():
    x = torch.randn(2, 3, 4)
    check(lambda e: e.reshape(4, -1), lambda t: t.reshape(4, -1), x)
    check(lambda e: e.view(6, 4), lambda t: t.view(6, 4), x)
    # a transposed tensor cannot be viewed: the copy fallback gives reshape's result
    check(lambda e: e.transpose(0, 2).view(-1), lambda t: t.transpose(0, 2).reshape(-1), x)
    check(lambda e: e.transpose(-1, 0), lambda t: t.transpose(-1, 0), x)
    check(lambda e: e.slice(1, 0, 3, 2), lambda t: t[:, 0:3:2], x)
    check(lambda e: e.slice(-1, -3, 100, 1), lambda t: t[..., -3:100], x)
    check(lambda e: e.slice(0, 5, 9, 1), lambda t: t[5:9], x)
    check(lambda a, b: et.concat([a, b], 1), lambda a, b: torch.cat([a, b], 1), x, torch.randn(2, 5, 4))
    check(lambda a, b: et.concat([a, b, a], -1), lambda a, b: torch.cat([a, b, a], -1), x, torch.randn(2, 3, 1))


@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize("dim,keep", [(-1, False), (-1, True), (0, False), (2, True), (1, False)])
def test_reductions(dim, keep, dtype):
    x = torch.randn(3, 4, 5, dtype=dtype)
    dims = () if dim < 0 else (dim,)
    tsum = (lambda t: t.sum(dim=dims, keepdim=keep)) if dims else (lambda t: t.sum().reshape([1] * 3 if keep else []))
    tmean = (lambda t: t.mean(dim=dims, keepdim=keep)) if dims else (lambda t: t.mean().reshape([1] * 3 if keep else []))
    check(lambda e: e.sum(dim, keep), tsum, x, kind="reduce")
    check(lambda e: e.mean(dim, keep), tmean, x, kind="reduce")


def test_sum_of_integers_and_empty():
    check(lambda e: e.sum(), lambda t: t.sum(), torch.arange(10, dtype=torch.int32), grad=False)
    check(lambda e: e.sum(0), lambda t: t.sum(0), torch.randn(0, 3), kind="reduce")
    check(lambda e: e.mean(0), lambda t: t.mean(0), torch.randn(0, 3), grad=False, kind="reduce")


@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize("dim", [0, -1, 1])
def test_softmax(dim, dtype):
    check(lambda e: e.softmax(dim), lambda t: torch.softmax(t, dim), torch.randn(3, 4, 5, dtype=dtype) * 4,
          kind="reduce")


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.int64, torch.float32, torch.uint8])
def test_masked_softmax_type2(mask_dtype):
    x = torch.randn(2, 3, 5)
    mask = torch.rand(2, 3, 5) < 0.4
    mask[0, 0] = True  # a fully masked row gives zeros
    check(lambda e, m: et.masked_softmax(e, m, -1, 2), lambda t, m: torch._masked_softmax(t, m != 0, -1, 2),
          x, mask.to(mask_dtype), kind="reduce")


@pytest.mark.parametrize("mask_type,mask_shape", [(0, (5, 5)), (1, (2, 5))])
def test_masked_softmax_attention_masks(mask_type, mask_shape):
    x = torch.randn(2, 3, 5, 5)
    mask = torch.rand(mask_shape) < 0.3
    # forward only: PyTorch's own backward rejects these mask layouts
    # ("Mask shape should match grad shape"), and so does ours.
    check(lambda e, m: et.masked_softmax(e, m, -1, mask_type),
          lambda t, m: torch._masked_softmax(t, m, -1, mask_type), x, mask, grad=False, kind="reduce")


def test_masked_softmax_backward():
    x, g = torch.randn(2, 4, 6), torch.randn(2, 4, 6)
    mask = torch.rand(2, 4, 6) < 0.3
    out = torch._masked_softmax(x, mask, -1, 2)
    expect = torch.ops.aten._masked_softmax_backward(g, out, mask, -1)
    same(et.masked_softmax_backward(to_et(g), to_et(out), to_et(mask.to(torch.int32)), -1), expect, kind="reduce")
    # and it is the gradient autograd finds
    xr = x.clone().requires_grad_()
    (torch._masked_softmax(xr, mask, -1, 2) * g).sum().backward()
    torch.testing.assert_close(expect, xr.grad)


def test_dropout():
    x = torch.randn(1000)
    check(lambda e: et.dropout(e, 0.3, False), lambda t: F.dropout(t, 0.3, False), x)
    check(lambda e: et.dropout(e, 0.0, True), lambda t: F.dropout(t, 0.0, True), x)
    et.manual_seed(5)
    got = to_torch(et.dropout(to_et(x), 0.5, True))
    if et.backend_current() == "torch":
        # libtorch's generator, seeded alike: the same mask.
        torch.manual_seed(5)
        same(to_et(got), F.dropout(x, 0.5, True))
    else:
        # Its own generator: what torch promises is the law of the mask. Each
        # element is kept with probability 0.5 and scaled by 2; 1000 draws put
        # the kept count within 5 sigma (sigma = 15.8) of 500.
        kept = got != 0
        assert torch.equal(got[kept], x[kept] * 2)
        assert abs(int(kept.sum()) - 500) < 80
        et.manual_seed(5)
        assert torch.equal(to_torch(et.dropout(to_et(x), 0.5, True)), got)


@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize("bias", [True, False])
def test_layernorm(bias, dtype):
    x, w, b = torch.randn(4, 3, 8, dtype=dtype), torch.randn(8, dtype=dtype), torch.randn(8, dtype=dtype)
    if bias:
        check(lambda x, w, b: et.layernorm(x, w, b, 1e-5), lambda x, w, b: F.layer_norm(x, (8,), w, b, 1e-5), x, w, b,
              kind="reduce")
    else:
        check(lambda x, w: et.layernorm(x, w, None, 1e-5), lambda x, w: F.layer_norm(x, (8,), w, None, 1e-5), x, w,
              kind="reduce")
    check(lambda x, w, b: et.layernorm(x, w, b, 1e-3), lambda x, w, b: F.layer_norm(x, (3, 8), w, b, 1e-3),
          x, torch.randn(3, 8, dtype=dtype), torch.randn(3, 8, dtype=dtype), kind="reduce")


def test_layernorm_backward():
    x, w, b, g = torch.randn(5, 16), torch.randn(16), torch.randn(16), torch.randn(5, 16)
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    (F.layer_norm(xr, (16,), wr, br, 1e-5) * g).sum().backward()
    dx, dw, db = et.layernorm_backward(to_et(x), to_et(w), to_et(b), 1e-5, to_et(g))
    same(dx, xr.grad, kind="reduce")
    same(dw, wr.grad, kind="reduce")
    same(db, br.grad, kind="reduce")
    dx, dw, db = et.layernorm_backward(to_et(x), to_et(w), None, 1e-5, to_et(g))
    assert db is None


@pytest.mark.parametrize("ids_dtype", [torch.int64, torch.int32])
def test_embedding(ids_dtype):
    w, ids = torch.randn(10, 4), torch.randint(0, 10, (3, 5), dtype=ids_dtype)
    check(lambda w, i: et.embedding(w, i), lambda w, i: F.embedding(i, w), w, ids)


@pytest.mark.parametrize("xs", [(4, 3), (2, 5, 3), (3,)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(xs, bias):
    x, w, b = torch.randn(xs), torch.randn(3, 6), torch.randn(6)
    if bias:
        check(lambda x, w, b: et.linear(x, w, b), lambda x, w, b: F.linear(x, w.t(), b), x, w, b, kind="reduce")
    else:
        check(lambda x, w: et.linear(x, w), lambda x, w: F.linear(x, w.t()), x, w, kind="reduce")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cross_entropy(dtype):
    logits, targets = torch.randn(6, 5, dtype=dtype), torch.randint(0, 5, (6,))
    check(lambda l, t: et.cross_entropy(l, t), F.cross_entropy, logits, targets, kind="reduce")
    probs = torch.softmax(torch.randn(6, 5, dtype=dtype), -1)
    check(lambda l, t: et.cross_entropy(l, t), F.cross_entropy, logits, probs, kind="reduce")


def test_dtype_and_device_conversion():
    x = torch.randn(3, 4)
    for name, dt in [("fp64", torch.float64), ("bf16", torch.bfloat16), ("fp16", torch.float16), ("int32", torch.int32)]:
        check(lambda e: e.to_dtype(name), lambda t: t.to(dt), x, grad=dt.is_floating_point)
    check(lambda e: e.to_device("cpu"), lambda t: t.to("cpu"), x)
    e = to_et(x).require_grad()
    d = e.detach()
    same(d, x)
    assert d.grad is None


def test_zero_size_and_scalar_inputs():
    check(lambda a, b: a @ b, torch.matmul, torch.randn(0, 3), torch.randn(3, 0), kind="reduce")
    check(lambda e: e.softmax(0), lambda t: torch.softmax(t, 0), torch.randn(()), kind="reduce")
    check(lambda e: e.relu(), torch.relu, torch.randn(()))


def test_operators_with_python_scalars_keep_their_operand_alive():
    # `x * 2.0` makes a 0-dim tensor for 2.0; it must live until the C call returns
    x = et.full([3], 3.0)
    assert (x * 2.0).tolist() == [6.0] * 3 and (x + 1).tolist() == [4.0] * 3
    assert (x - 1.0).tolist() == [2.0] * 3 and (x / 2).tolist() == [1.5] * 3
    assert (2.0 * x).tolist() == [6.0] * 3 and (1 - x).tolist() == [-2.0] * 3


@pytest.mark.parametrize("dtype", sorted(TORCH_DT, key=str), ids=lambda d: DT[d])
@pytest.mark.parametrize("shape", [(4,), (), (0,), (2, 0, 3), (3, 5, 7)])
def test_creation_like_torch(dtype, shape):
    # zeros on the CPU is written by hand on the torch backend (the allocator's
    # empty tensor plus zero bytes): every dtype and shape, against torch.zeros.
    name = DT[dtype]
    same(et.zeros(list(shape), name), torch.zeros(shape, dtype=dtype))
    same(et.ones(list(shape), name), torch.ones(shape, dtype=dtype))
    z = et.zeros(list(shape), name)
    assert to_torch(z).is_contiguous()
    if dtype.is_floating_point:
        assert not torch.signbit(to_torch(z).float()).any()  # +0.0, not -0.0
