"""Convolutions and pools beyond the oracle cases (test_op_table.py): the
refusals both backends share, code and message (libtorch's refusals are
explained by core's shape rules, `src/vocab/conv.rs`, the native kernels
check with the same rules), and F.max_pool2d(return_indices=True)."""

import numpy as np
import pytest
import torch

import enkai_tensor as et

pytestmark = pytest.mark.usefixtures("backend")


def t(*shape, dtype=np.float32):
    return et.from_numpy(np.random.default_rng(0).standard_normal(shape).astype(dtype))


REFUSED = [
    ("E_SHAPE", "conv2d", lambda: [t(1, 2, 5, 5), t(3, 3, 3, 3)], {}, "to have 3 channels, but got 2 channels"),
    ("E_SHAPE", "conv2d", lambda: [t(1, 2, 2, 2), t(3, 2, 3, 3)], {}, "Kernel size can't be greater than actual input size"),
    ("E_SHAPE", "conv2d", lambda: [t(2, 2, 5, 5, 5), t(3, 2, 3, 3)], {}, "3D (unbatched) or 4D (batched) input"),
    ("E_SHAPE", "conv2d", lambda: [t(1, 4, 5, 5), t(3, 2, 3, 3)], {"groups": 2}, "expected weight to be divisible by 2"),
    ("E_SHAPE", "conv2d", lambda: [t(1, 2, 5, 5), t(3, 2, 3, 3), t(4)], {}, "expected bias to be 1-dimensional with 3 elements"),
    ("E_INVALID_ARG", "conv2d", lambda: [t(1, 2, 5, 5), t(3, 2, 3, 3)], {"stride": [0, 1]}, "non-positive stride"),
    ("E_INVALID_ARG", "conv2d", lambda: [t(1, 2, 5, 5), t(3, 2, 3, 3)], {"padding": [-1, 0]}, "negative padding"),
    ("E_INVALID_ARG", "conv2d", lambda: [t(1, 2, 5, 5), t(3, 2, 3, 3)], {"stride": [1, 2, 3]}, "a list of 2 values"),
    ("E_INVALID_ARG", "conv2d", lambda: [t(1, 2, 5, 5), t(3, 2, 3, 3)], {"padding": "same", "stride": [2, 2]}, "not supported for strided"),
    ("E_INVALID_ARG", "conv2d", lambda: [t(1, 2, 5, 5), t(3, 2, 3, 3)], {"padding": "full"}, "padding string"),
    ("E_DTYPE", "conv2d", lambda: [t(1, 2, 5, 5), t(3, 2, 3, 3, dtype=np.float64)], {}, "should be the same"),
    ("E_DTYPE", "conv2d", lambda: [t(1, 2, 5, 5), t(3, 2, 3, 3), t(3, dtype=np.float64)], {}, "should be the same"),
    ("E_SHAPE", "conv1d", lambda: [t(3, 2), t(4, 3, 3)], {}, "Kernel size can't be greater"),
    ("E_SHAPE", "conv_transpose2d", lambda: [t(1, 2, 5, 5), t(3, 3, 3, 3)], {}, "to have 3 channels, but got 2 channels"),
    ("E_INVALID_ARG", "conv_transpose2d", lambda: [t(1, 2, 5, 5), t(2, 3, 3, 3)], {"stride": [2, 2], "output_padding": [2, 2]}, "output padding must be smaller"),
    ("E_INVALID_ARG", "max_pool2d", lambda: [t(1, 2, 5, 5)], {"kernel_size": [3, 3], "padding": [2, 2]}, "pad should be at most half"),
    ("E_SHAPE", "max_pool2d", lambda: [t(1, 2, 1, 1)], {"kernel_size": [2, 2]}, "Output size is too small"),
    ("E_INVALID_ARG", "max_pool2d", lambda: [t(1, 2, 5, 5)], {"kernel_size": [2, 2], "stride": [0, 0]}, "stride should not be zero"),
    ("E_SHAPE", "max_pool2d_with_indices", lambda: [t(2, 0, 5, 5)], {"kernel_size": [2, 2]}, "3D or 4D"),
    ("E_INVALID_ARG", "avg_pool2d", lambda: [t(1, 2, 5, 5)], {"kernel_size": [2, 2], "divisor_override": 0}, "divisor must be not zero"),
    ("E_DTYPE", "avg_pool2d", lambda: [t(1, 2, 5, 5, dtype=np.int32)], {"kernel_size": [2, 2]}, "not implemented for"),
    ("E_INVALID_ARG", "adaptive_avg_pool2d", lambda: [t(1, 2, 5, 5)], {"output_size": [2]}, "output_size must be 2"),
    ("E_DTYPE", "adaptive_avg_pool2d", lambda: [t(1, 2, 5, 5, dtype=np.int64)], {"output_size": [2, 2]}, "not implemented for"),
]


@pytest.mark.parametrize("code,name,inputs,kwargs,text", REFUSED, ids=[f"{c[1]}-{i}" for i, c in enumerate(REFUSED)])
def test_both_backends_refuse_with_the_same_code(code, name, inputs, kwargs, text, backend):
    ins = inputs()
    with pytest.raises(et.EnkaiError) as e:
        et.op(name, *ins, **kwargs)
    assert e.value.code == code, str(e.value)
    assert text.lower() in str(e.value).lower(), str(e.value)


def test_max_pool2d_return_indices_is_max_pool2d_with_indices(backend):
    a = np.random.default_rng(1).standard_normal((2, 3, 9, 8)).astype(np.float32)
    ref, ref_i = torch.nn.functional.max_pool2d(torch.from_numpy(a), 3, 2, 1, return_indices=True)
    got, got_i = et.op("max_pool2d_with_indices", et.from_numpy(a), kernel_size=[3, 3], stride=[2, 2], padding=[1, 1])
    np.testing.assert_array_equal(got.numpy(), ref.numpy())
    assert got_i.dtype == "int64"
    np.testing.assert_array_equal(got_i.numpy(), ref_i.numpy())


# Shapes that take each of the native kernel's paths: images whose
# unrolled columns fit one block (the products split across the pool, or
# the images), and images unrolled in blocks of output rows (64 channels
# of 40x40 unroll to 3.7 MB: blocks of 11, 11, 11 and 7 rows at 1 MiB a
# block; 256 channels of 12x12, 9 and 3 rows), with groups, stride and
# dilation, at 1 and 2 threads.
CONV_PATHS = [
    ((130, 1, 8, 8), (16, 1, 3, 3), {"padding": [1, 1]}),
    ((9, 16, 4, 4), (32, 16, 3, 3), {"padding": [1, 1]}),
    ((6, 4, 7, 6), (6, 2, 3, 2), {"groups": 2, "stride": [2, 1], "dilation": [1, 2], "padding": [1, 0]}),
    ((2, 64, 40, 40), (64, 64, 3, 3), {"padding": [1, 1]}),
    ((2, 64, 16, 16), (32, 32, 3, 3), {"groups": 2, "stride": [2, 2]}),
    ((2, 256, 12, 12), (8, 256, 3, 3), {"padding": [1, 1]}),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("xs,ws,kw", CONV_PATHS, ids=[str(i) for i in range(len(CONV_PATHS))])
def test_conv2d_and_its_gradients_equal_pytorch_in_every_product_layout(xs, ws, kw, threads, backend):
    """fp32 against torch.nn.functional.conv2d on the same values: each
    output and gradient is a sum of up to 576 products, whose order
    differs between the two; rtol 1e-4 with atol 1e-4 of the largest value
    is a few hundred ulps of such a sum, far below any indexing error (which
    moves values by O(1))."""
    rng = np.random.default_rng(7)
    a, w, b = (rng.standard_normal(s).astype(np.float32) for s in (xs, ws, (ws[0],)))
    g = rng.standard_normal(torch.nn.functional.conv2d(torch.from_numpy(a), torch.from_numpy(w), **kw).shape).astype(np.float32)
    ta, tw, tb = (torch.from_numpy(v).requires_grad_() for v in (a, w, b))
    ref = torch.nn.functional.conv2d(ta, tw, tb, **kw)
    ref.backward(torch.from_numpy(g))
    old = et.get_num_threads()
    et.set_num_threads(threads)
    try:
        x, wt, bt = (et.from_numpy(v).require_grad() for v in (a, w, b))
        out = et.op("conv2d", x, wt, bt, **kw)
        (out * et.from_numpy(g)).sum().backward()
    finally:
        et.set_num_threads(old)
    for name, ours, theirs in (("out", out, ref), ("x.grad", x.grad, ta.grad), ("w.grad", wt.grad, tw.grad), ("b.grad", bt.grad, tb.grad)):
        r = theirs.detach().numpy()
        np.testing.assert_allclose(ours.numpy(), r, rtol=1e-4, atol=1e-4 * float(np.abs(r).max()), err_msg=name)


def test_max_pool2d_takes_the_first_largest_and_the_last_nan(backend):
    """Ties, -inf and NaN in windows, overlapping windows with padding:
    values and indices equal PyTorch's exactly."""
    rng = np.random.default_rng(3)
    a = rng.integers(-2, 3, (4, 3, 9, 7)).astype(np.float32)
    a[0, 0, :3, :3] = -np.inf
    a[1, 1, 2, 2] = np.nan
    a[1, 1, 2, 4] = np.nan
    a[2, 2, 5:, :] = np.nan
    ref, ref_i = torch.nn.functional.max_pool2d(torch.from_numpy(a), 3, 2, 1, return_indices=True)
    got, got_i = et.op("max_pool2d_with_indices", et.from_numpy(a), kernel_size=[3, 3], stride=[2, 2], padding=[1, 1])
    np.testing.assert_array_equal(got.numpy(), ref.numpy())
    np.testing.assert_array_equal(got_i.numpy(), ref_i.numpy())
