"""Autograd and gradient utilities against torch.autograd and torch.nn.utils."""

import gc
import math

import pytest
import torch

import enkai_tensor as et
from helpers import native_tol, same, to_et

pytestmark = pytest.mark.usefixtures("backend")


def leaves(*shapes):
    ts = [torch.randn(s) for s in shapes]
    return ts, [to_et(t).require_grad() for t in ts], [t.clone().requires_grad_() for t in ts]


def test_grads_accumulate_like_pytorch():
    (x,), (e,), (t,) = leaves((3, 4))
    for _ in range(3):
        (e * e).sum().backward()
        (t * t).sum().backward()
    same(e.grad, t.grad, kind="reduce")
    e.zero_grad()
    t.grad.zero_()
    same(e.grad, t.grad)


def test_grad_is_none_without_backward_and_no_error():
    e = et.randn([2]).require_grad()
    assert e.grad is None
    assert et.grad_multi([e, None]) == [None, None]


def test_grad_multi_and_zero_grad_multi():
    _, es, ts = leaves((2, 3), (3,), (4,))
    loss_e = (es[0] @ es[1]).sum()
    loss_t = (ts[0] @ ts[1]).sum()
    loss_e.backward()
    loss_t.backward()
    grads = et.grad_multi(es)
    same(grads[0], ts[0].grad, kind="reduce")
    same(grads[1], ts[1].grad, kind="reduce")
    assert grads[2] is None
    et.zero_grad_multi(es)
    same(grads[0], torch.zeros(2, 3))  # the grad handle shares storage with .grad


def test_backward_errors():
    e = et.randn([2, 3]).require_grad()
    with pytest.raises(et.EnkaiError) as ex:
        (e * e).backward()
    assert ex.value.code == "E_AUTOGRAD" and "[2,3]" in str(ex.value)
    loss = (e * e).sum()
    loss.backward()
    with pytest.raises(et.EnkaiError) as ex:
        loss.backward()
    assert ex.value.code == "E_AUTOGRAD"
    with pytest.raises(et.EnkaiError) as ex:
        et.randn([]).backward()
    assert ex.value.code == "E_AUTOGRAD"
    with pytest.raises(et.EnkaiError) as ex:
        et.zeros([2], "int64").require_grad()
    assert ex.value.code == "E_DTYPE"


def test_stale_entries_in_lists_are_errors():
    e = et.randn([2]).require_grad()
    (e * e).sum().backward()
    g = e.grad
    stale = g.handle
    g.free()
    gc.collect()  # tensors of earlier tests must not be freed during the count
    before = et.live()["tensors"]
    for call in (lambda: et.grad_multi([e, stale]), lambda: et.zero_grad_multi([stale]),
                 lambda: et.check_finite_multi([stale]), lambda: et.scale_grads_multi([stale], 2.0),
                 lambda: et.clip_grad_norm_multi([e, stale], 1.0)):
        with pytest.raises(et.EnkaiError) as ex:
            call()
        assert ex.value.code == "E_HANDLE_STALE"
    assert et.live()["tensors"] == before


def test_check_finite_and_scale():
    a, b = et.ones([3]), to_et(torch.tensor([1.0, float("inf")]))
    et.check_finite_multi([a, None, a])
    with pytest.raises(et.EnkaiError) as ex:
        et.check_finite_multi([a, b])
    assert ex.value.code == "E_NOT_FINITE" and str(b.handle) in str(ex.value)
    x = torch.randn(5)
    e = to_et(x)
    et.scale_grads_multi([e, None], 0.25)
    same(e, x.mul_(0.25))


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_torch(max_norm, norm_type):
    grads = [torch.randn(4, 5), torch.randn(7), torch.randn(2, 2, 2)]
    es = [to_et(g) for g in grads]
    params = [torch.zeros_like(g, requires_grad=True) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    expect = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
    total = et.clip_grad_norm_multi(es + [None], max_norm, norm_type)
    rtol, _ = native_tol(torch.float32, kind="reduce")
    assert total == pytest.approx(expect.item(), rel=rtol, abs=0)
    for e, p in zip(es, params):
        same(e, p.grad, kind="reduce")  # scaled by a coefficient made of a norm


def test_clip_grad_norm_argument_errors():
    with pytest.raises(et.EnkaiError) as ex:
        et.clip_grad_norm_multi([et.ones([2])], 1.0, 0.0)
    assert ex.value.code == "E_INVALID_ARG"
    assert et.clip_grad_norm_multi([], 1.0) == 0.0


BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "div": lambda a, b: a / b}
UNARY = ["relu", "sigmoid", "tanh", "gelu"]


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_ops_on_plain_and_grad_inputs_like_pytorch(op):
    # The torch backend runs an op below the autograd layer when no input
    # requires grad; a plain result must still enter a graph later exactly as
    # PyTorch's does, and a mixed one must carry the grad.
    f = BINARY[op]
    (x, y, z), (ex, ey, ez), (tx, ty, tz) = leaves((3, 4), (3, 4), (4,))
    ep, tp = f(to_et(x), to_et(y)), f(x, y)  # plain inputs: no graph
    same(ep, tp)
    loss_e = (f(ep, ex) + f(ez, ep)).sum()
    loss_t = (f(tp, tx) + f(tz, tp)).sum()
    loss_e.backward()
    loss_t.backward()
    same(ex.grad, tx.grad, kind="reduce")
    same(ez.grad, tz.grad, kind="reduce")
    assert ey.grad is None


@pytest.mark.parametrize("op", UNARY)
def test_unary_ops_on_plain_and_grad_inputs_like_pytorch(op):
    (x,), (ex,), (tx,) = leaves((5, 6))
    tf = getattr(torch, op) if hasattr(torch, op) else getattr(torch.nn.functional, op)
    ep, tp = getattr(to_et(x), op)(), tf(x)  # a plain input: no graph
    same(ep, tp, kind="reduce" if op == "gelu" else "elementwise")
    getattr(ex, op)().sum().backward()
    tf(tx).sum().backward()
    same(ex.grad, tx.grad, kind="reduce")
    (ep * ex).sum().backward()  # a plain result feeding a graph
    (tp * tx).sum().backward()
    same(ex.grad, tx.grad, kind="reduce")


def test_gradients_meeting_at_a_node_sum_like_pytorch():
    # A node reached by several branches (the native engine sums their
    # gradients in place when nothing else holds the first): slices of one
    # tensor, a residual-style reuse, and one branch passing its gradient on twice.
    (x, w), (ex, ew), (tx, tw) = leaves((4, 6), (6, 6))
    eh, th = ex @ ew, tx @ tw
    ep = [eh.slice(1, i, i + 2) for i in (0, 2, 4)]
    tp = [th[:, i:i + 2] for i in (0, 2, 4)]
    loss_e = ((ep[0] * ep[1]).sum() + (ep[2] + ep[2]).sum() + (eh + eh * eh).sum())
    loss_t = ((tp[0] * tp[1]).sum() + (tp[2] + tp[2]).sum() + (th + th * th).sum())
    loss_e.backward()
    loss_t.backward()
    same(ex.grad, tx.grad, kind="reduce")
    same(ew.grad, tw.grad, kind="reduce")


def test_grad_mode_like_torch():
    # torch.no_grad / enable_grad / set_grad_enabled: inside no_grad, ops on
    # leaves that require grad record no graph (backward has nothing to run);
    # a graph recorded before still runs; modes nest and come back on exit.
    assert et.is_grad_enabled() and torch.is_grad_enabled()
    (x, w), (ex, ew), (tx, tw) = leaves((4, 3), (3, 2))
    kept_e, kept_t = (ex @ ew).relu().sum(), (tx @ tw).relu().sum()
    with et.no_grad(), torch.no_grad():
        assert not et.is_grad_enabled() and not torch.is_grad_enabled()
        out_e, out_t = (ex @ ew).sigmoid().sum(), (tx @ tw).sigmoid().sum()
        same(out_e, out_t, kind="reduce")
        assert not out_t.requires_grad
        with pytest.raises(et.EnkaiError) as ex_info:
            out_e.backward()
        assert ex_info.value.code == "E_AUTOGRAD"
        kept_e.backward()  # recorded with grad on: runs as in torch
        kept_t.backward()
        with et.enable_grad(), torch.enable_grad():
            assert et.is_grad_enabled()
            (ex * ew.sum()).sum().backward()
            (tx * tw.sum()).sum().backward()
        assert not et.is_grad_enabled()
    assert et.is_grad_enabled()
    same(ew.grad, tw.grad, kind="reduce")
    same(ex.grad, tx.grad, kind="reduce")
    prev = et.set_grad_enabled(False)  # a call, as torch.set_grad_enabled(False)
    assert not et.is_grad_enabled() and prev is not None
    et.set_grad_enabled(True)
    assert et.is_grad_enabled()

    @et.no_grad()
    def infer(a):
        assert not et.is_grad_enabled()
        return (a * 3).sum()

    with pytest.raises(et.EnkaiError):
        infer(ex).backward()
    assert et.is_grad_enabled()


def test_grad_mode_is_per_thread_and_checked():
    import threading
    seen = []
    with et.no_grad():
        t = threading.Thread(target=lambda: seen.append(et.is_grad_enabled()))
        t.start()
        t.join()
        assert not et.is_grad_enabled()
    assert seen == [True]  # as torch: each thread starts with grad on
    lib = et.lib
    assert lib.enkai_set_grad_enabled(2) == -1 and lib.enkai_tensor_last_error().startswith(b"E_INVALID_ARG")
    assert et.is_grad_enabled()
    assert lib.enkai_set_grad_enabled(0) == 1 and lib.enkai_set_grad_enabled(1) == 0
