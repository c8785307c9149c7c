"""batch_norm and group_norm beyond the generated oracle suite
(test_op_table.py): the running statistics that batch_norm updates in place
over several training steps, eval with the stats training left, training
gradients at fp64, a bf16 input with fp32 parameters (as nn.BatchNorm keeps
them), and the refusals, with the same code on both backends. The oracle is
`torch.nn.functional` on the same values.

Tolerances: on the torch backend both sides run libtorch's kernels, so the
forward values are compared exactly and the gradients at 1e-12 relative to
the largest element (autograd may sum in another order); on the cpu
backend helpers.NATIVE_TOL's "reduce" class (a norm is a sum over a channel
or group). The fp64 gradients are held to 1e-10 of the largest element on
both: a channel's sums over at most 120 values, each rounding at 2^-52."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import enkai_tensor as et
from helpers import same, to_et, to_torch

pytestmark = pytest.mark.usefixtures("backend")


def bn(x, rm, rv, w=None, b=None, **kw):
    return et.op("batch_norm", x, rm, rv, w, b, **kw)


def close(e, t, rtol):
    """`e` equals `t` within rtol of the largest |value| of `t`."""
    got, want = to_torch(e).double(), t.detach().double()
    scale = float(want.abs().max()) if want.numel() else 0.0
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [[8, 4], [4, 4, 6], [2, 4, 5, 3]])
def test_running_stats_follow_torch_over_training_steps(shape, dtype):
    g = torch.Generator().manual_seed(sum(shape))
    c = shape[1]
    rm_t, rv_t = torch.randn(c, generator=g, dtype=dtype) * 0.1, torch.rand(c, generator=g, dtype=dtype) + 0.5
    rm, rv = to_et(rm_t), to_et(rv_t)
    w_t, b_t = torch.randn(c, generator=g, dtype=dtype), torch.randn(c, generator=g, dtype=dtype)
    w, b = to_et(w_t), to_et(b_t)
    for step, momentum in enumerate([0.1, 0.1, 0.3, 1.0, 0.05]):
        x_t = torch.randn(shape, generator=g, dtype=dtype) * (1 + step) + step
        want = F.batch_norm(x_t, rm_t, rv_t, w_t, b_t, training=True, momentum=momentum)
        got = bn(to_et(x_t), rm, rv, w, b, training=True, momentum=momentum)
        same(got, want, kind="reduce")
        same(rm, rm_t, kind="reduce")
        same(rv, rv_t, kind="reduce")
    # Eval with the stats training left behind.
    x_t = torch.randn(shape, generator=g, dtype=dtype)
    same(bn(to_et(x_t), rm, rv, w, b), F.batch_norm(x_t, rm_t, rv_t, w_t, b_t), kind="reduce")
    same(bn(to_et(x_t), rm, rv, eps=0.1), F.batch_norm(x_t, rm_t, rv_t, eps=0.1), kind="reduce")


def test_running_stats_written_through_a_strided_view():
    """A running stat that is a view (every other element of a buffer) is
    updated through its strides: the buffer's other elements stay."""
    g = torch.Generator().manual_seed(3)
    base_t = torch.rand(12, generator=g) + 0.5
    base = to_et(base_t)
    rm, rm_t = base.slice(0, 0, 6, 2), base_t[0:6:2]
    rv, rv_t = base.slice(0, 7, 12, 2), base_t[7:12:2]
    x_t = torch.randn(5, 3, generator=g)
    F.batch_norm(x_t, rm_t, rv_t, training=True)
    bn(to_et(x_t), rm, rv, training=True)
    same(base, base_t, kind="reduce")


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [[6, 3], [4, 3, 5], [2, 3, 4, 5]])
def test_batch_norm_gradients_fp64(shape, training):
    g = torch.Generator().manual_seed(len(shape) + training)
    c = shape[1]
    x_t = torch.randn(shape, generator=g, dtype=torch.float64).requires_grad_()
    w_t = (torch.rand(c, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    b_t = torch.randn(c, generator=g, dtype=torch.float64).requires_grad_()
    rm_t, rv_t = torch.randn(c, generator=g, dtype=torch.float64), torch.rand(c, generator=g, dtype=torch.float64) + 0.5
    r = torch.randn(shape, generator=g, dtype=torch.float64)
    x, w, b = (to_et(t).require_grad() for t in (x_t, w_t, b_t))
    rm, rv = to_et(rm_t), to_et(rv_t)
    y_t = F.batch_norm(x_t, rm_t, rv_t, w_t, b_t, training=training)
    want = torch.autograd.grad((y_t * r).sum(), [x_t, w_t, b_t])
    y = bn(x, rm, rv, w, b, training=training)
    (y * to_et(r)).sum().backward()
    for got, ref in zip((x.grad, w.grad, b.grad), want):
        close(got, ref, 1e-10)
    # Without running stats or affine parameters: the input's gradient alone.
    if training:
        x2 = to_et(x_t).require_grad()
        (bn(x2, None, None, training=True) * to_et(r)).sum().backward()
        close(x2.grad, torch.autograd.grad((F.batch_norm(x_t, None, None, training=True) * r).sum(), x_t)[0], 1e-10)


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape,groups", [([4, 6], 3), ([2, 6, 5], 2), ([3, 4, 3, 2], 4), ([2, 4, 3], 1)])
def test_group_norm_gradients_fp64(shape, groups, affine):
    g = torch.Generator().manual_seed(groups + len(shape))
    c = shape[1]
    x_t = torch.randn(shape, generator=g, dtype=torch.float64).requires_grad_()
    w_t = (torch.rand(c, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    b_t = torch.randn(c, generator=g, dtype=torch.float64).requires_grad_()
    r = torch.randn(shape, generator=g, dtype=torch.float64)
    x, w, b = (to_et(t).require_grad() for t in (x_t, w_t, b_t))
    leaves_t, leaves = ([x_t, w_t, b_t], [x, w, b]) if affine else ([x_t], [x])
    y_t = F.group_norm(x_t, groups, *leaves_t[1:], eps=1e-3)
    want = torch.autograd.grad((y_t * r).sum(), leaves_t)
    y = et.op("group_norm", x, *leaves[1:], num_groups=groups, eps=1e-3)
    close(y, y_t, 1e-12)
    (y * to_et(r)).sum().backward()
    for got, ref in zip((t.grad for t in leaves), want):
        close(got, ref, 1e-10)


def test_bf16_input_with_fp32_parameters():
    """nn.BatchNorm's fp32 parameters and buffers with a bf16 activation (as
    under autocast): the result is bf16, the running stats stay fp32."""
    g = torch.Generator().manual_seed(5)
    x_t = torch.randn(4, 3, 5, generator=g).bfloat16()
    rm_t, rv_t, w_t, b_t = torch.zeros(3), torch.ones(3), torch.rand(3, generator=g) + 0.5, torch.randn(3, generator=g)
    rm, rv, w, b = (to_et(t) for t in (rm_t, rv_t, w_t, b_t))
    for training in (True, True, False):
        want = F.batch_norm(x_t, rm_t, rv_t, w_t, b_t, training=training)
        got = bn(to_et(x_t), rm, rv, w, b, training=training)
        assert got.dtype == "bf16" and rm.dtype == "fp32"
        same(got, want, kind="reduce")
        same(rm, rm_t, kind="reduce")
        same(rv, rv_t, kind="reduce")
    same(et.op("group_norm", to_et(x_t), w, b, num_groups=3), F.group_norm(x_t, 3, w_t, b_t), kind="reduce")
    # bf16 throughout, and its gradients.
    xb = x_t.clone().requires_grad_()
    wb, bb = w_t.bfloat16().requires_grad_(), b_t.bfloat16().requires_grad_()
    y_t = F.batch_norm(xb, None, None, wb, bb, training=True)
    want = torch.autograd.grad(y_t.float().sum(), [xb, wb, bb])
    x, w, b = (to_et(t).require_grad() for t in (xb, wb, bb))
    y = bn(x, None, None, w, b, training=True)
    same(y, y_t, kind="reduce")
    y.to_dtype("fp32").sum().backward()
    for got, ref in zip((x.grad, w.grad, b.grad), want):
        same(got, ref, kind="reduce")


def test_refusals_have_the_same_code_on_both_backends():
    x = to_et(torch.randn(4, 3))
    stats = to_et(torch.zeros(3)), to_et(torch.ones(3))
    cases = [
        (lambda: bn(x, None, None), "E_INVALID_ARG", "running_mean must be defined in evaluation mode"),
        (lambda: bn(x, stats[0], None), "E_INVALID_ARG", "running_mean and running_var must either both be None or neither be None"),
        (lambda: bn(x, None, stats[1], training=True), "E_INVALID_ARG", "running_mean and running_var must either both be None or neither be None"),
        (lambda: bn(to_et(torch.randn(1, 3)), None, None, training=True), "E_INVALID_ARG", "Expected more than 1 value per channel when training"),
        (lambda: bn(to_et(torch.randn(1, 3, 1)), *stats, training=True), "E_INVALID_ARG", "Expected more than 1 value per channel when training"),
        (lambda: bn(x, to_et(torch.zeros(4)), to_et(torch.ones(4))), "E_SHAPE", "running_mean should contain 3 elements not 4"),
        (lambda: bn(x, *stats, to_et(torch.ones(2))), "E_SHAPE", "weight should contain 3 elements not 2"),
        (lambda: bn(to_et(torch.randn(3)), *stats), "E_SHAPE", "at least 2 dimensions"),
        (lambda: bn(x, to_et(torch.zeros(3).bfloat16()), to_et(torch.ones(3).bfloat16())), "E_DTYPE", "mixed dtype"),
        (lambda: et.op("group_norm", to_et(torch.randn(2, 6, 3)), num_groups=4), "E_SHAPE",
         "Expected number of channels in input to be divisible by num_groups, but got input of shape [2,6,3] and num_groups=4"),
        (lambda: et.op("group_norm", to_et(torch.randn(2, 6, 3)), num_groups=-2), "E_INVALID_ARG", "Expected num groups to be greater than 0, got -2"),
        (lambda: et.op("group_norm", to_et(torch.randn(2, 6, 3)), to_et(torch.ones(5)), num_groups=3), "E_SHAPE",
         "Expected weight to be a vector of size equal to the number of channels in input"),
    ]
    for fn, code, words in cases:
        with pytest.raises(et.EnkaiError) as e:
            fn()
        assert e.value.code == code and words in str(e.value), str(e.value)
    # A refused training call leaves the running stats as they were.
    np.testing.assert_array_equal(stats[0].numpy(), np.zeros(3, np.float32))
    np.testing.assert_array_equal(stats[1].numpy(), np.ones(3, np.float32))


def test_the_running_stat_update_is_pytorchs():
    """The update writes the stat in place without bumping its version
    counter, as PyTorch's batch_norm (2.13): a backward that saved the stat
    runs and reads the updated values, giving PyTorch's gradient."""
    a_t, rm_t = torch.ones(3, requires_grad=True), torch.zeros(3)
    x_t = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
    a, rm, rv = to_et(a_t.detach()).require_grad(), to_et(rm_t), to_et(torch.ones(3))
    y_t, y = a_t * rm_t, a * rm  # each saves its rm for a's gradient
    F.batch_norm(x_t, rm_t, torch.ones(3), training=True)
    bn(to_et(x_t), rm, rv, training=True)
    y_t.sum().backward()
    y.sum().backward()
    same(a.grad, a_t.grad, kind="reduce")
    assert float(a_t.grad.abs().sum()) > 0  # the updated stat, not the zeros saved


def test_empty_batch():
    x_t = torch.randn(0, 3, 4)
    rm_t, rv_t = torch.zeros(3), torch.ones(3)
    rm, rv = to_et(rm_t), to_et(rv_t)
    got = bn(to_et(x_t), rm, rv, training=True)
    want = F.batch_norm(x_t, rm_t, rv_t, training=True)
    assert tuple(got.shape) == tuple(want.shape)
    same(rm, rm_t)
    same(rv, rv_t)


def test_group_norm_bias_without_weight_gradients(backend):
    """PyTorch 2.13's backward fails for a bias without a weight ("tensor
    does not have a device"), and so does the torch backend, which runs that
    kernel (E_AUTOGRAD, its words); the native backend gives the derivative,
    which is that of weight = ones."""
    g = torch.Generator().manual_seed(11)
    x_t = torch.randn(2, 4, 3, generator=g, dtype=torch.float64).requires_grad_()
    b_t = torch.randn(4, generator=g, dtype=torch.float64).requires_grad_()
    r = torch.randn(2, 4, 3, generator=g, dtype=torch.float64)
    y_t = F.group_norm(x_t, 2, torch.ones(4, dtype=torch.float64), b_t)
    want = torch.autograd.grad((y_t * r).sum(), [x_t, b_t])
    x, b = to_et(x_t).require_grad(), to_et(b_t).require_grad()
    y = et.op("group_norm", x, None, b, num_groups=2)
    close(y, y_t, 1e-12)
    if backend == "torch":
        with pytest.raises(et.EnkaiError) as e:
            (y * to_et(r)).sum().backward()
        assert e.value.code == "E_AUTOGRAD" and "tensor does not have a device" in str(e.value)
        return
    (y * to_et(r)).sum().backward()
    for got, ref in zip((x.grad, b.grad), want):
        close(got, ref, 1e-10)
