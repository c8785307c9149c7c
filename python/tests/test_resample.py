"""interpolate, unfold and fold beyond the generated oracle suite
(test_op_table.py): a sweep of input and output sizes and scale factors
for every mode (the nearest modes' index rounding in float is where
implementations differ), fp64 gradients, half precision, and the refusals,
with the same code on both backends. The oracle is `torch.nn.functional`.

Tolerances: the nearest modes copy values, so they must be exact on both
backends (any index difference shows). The linear modes blend two values
per axis: on the torch backend both sides run libtorch's kernels (exact);
the native backend blends in fp64 and rounds once, so helpers.NATIVE_TOL's
"reduce" class (at most 8 terms). fp64 gradients are held to 1e-12 of the
largest element: each is a sum of at most a few dozen weighted terms."""

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import enkai_tensor as et
from helpers import same, to_et, to_torch

pytestmark = pytest.mark.usefixtures("backend")

SCALES = [0.3, 0.5, 0.75, 1.0, 1.5, 1.7, 2.0, 2.5, 3.1]


def interp(x, **kw):
    return et.op("interpolate", x, **kw)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "bilinear", "bilinear-ac"])
def test_sizes_and_scales_sweep(mode):
    kw = {"mode": "bilinear", "align_corners": True} if mode == "bilinear-ac" else {"mode": mode}
    exact = mode.startswith("nearest")
    g = torch.Generator().manual_seed(7)
    for h, w in [(1, 1), (2, 3), (5, 4), (7, 9)]:
        x_t = torch.randn(1, 2, h, w, generator=g)
        x = to_et(x_t)
        for oh, ow in itertools.product([1, 2, 5, 8, 13], [1, 3, 7, 18]):
            same(interp(x, size=[oh, ow], **kw), F.interpolate(x_t, size=[oh, ow], **kw), kind="elementwise" if exact else "reduce")
        for s in SCALES:
            if int(h * s) < 1 or int(w * s) < 1:
                continue
            want = F.interpolate(x_t, scale_factor=s, **kw)
            same(interp(x, scale_factor=s, **kw), want, kind="elementwise" if exact else "reduce")
            want = F.interpolate(x_t, scale_factor=s, recompute_scale_factor=True, **kw)
            same(interp(x, scale_factor=s, recompute_scale_factor=True, **kw), want, kind="elementwise" if exact else "reduce")


@pytest.mark.parametrize("shape,kw", [
    ([2, 3, 5], {"size": [11], "mode": "nearest"}),
    ([2, 3, 5], {"scale_factor": 1.6, "mode": "linear"}),
    ([2, 3, 5], {"size": [3], "mode": "linear", "align_corners": True}),
    ([1, 2, 4, 5], {"size": [9, 7], "mode": "nearest-exact"}),
    ([1, 2, 4, 5], {"scale_factor": 2.3, "mode": "bilinear"}),
    ([1, 2, 6, 5], {"size": [3, 8], "mode": "bilinear", "align_corners": True}),
    ([1, 2, 3, 4, 2], {"size": [5, 2, 3], "mode": "trilinear"}),
    ([1, 2, 3, 4, 2], {"scale_factor": 1.5, "mode": "nearest"}),
])
def test_interpolate_gradients_fp64(shape, kw):
    g = torch.Generator().manual_seed(len(shape))
    x_t = torch.randn(shape, generator=g, dtype=torch.float64).requires_grad_()
    y_t = F.interpolate(x_t, **kw)
    r = torch.randn(y_t.shape, generator=g, dtype=torch.float64)
    (want,) = torch.autograd.grad((y_t * r).sum(), x_t)
    x = to_et(x_t).require_grad()
    y = interp(x, **kw)
    same(y, y_t, kind="reduce")
    (y * to_et(r)).sum().backward()
    np.testing.assert_allclose(to_torch(x.grad).numpy(), want.numpy(), rtol=1e-12, atol=1e-12 * float(want.abs().max()))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_interpolate_half(dtype):
    g = torch.Generator().manual_seed(4)
    x_t = torch.randn(1, 3, 5, 6, generator=g).to(dtype)
    for kw in ({"size": [8, 9]}, {"scale_factor": 1.5, "mode": "bilinear"}, {"size": [4, 11], "mode": "bilinear", "align_corners": True}):
        same(interp(to_et(x_t), **kw), F.interpolate(x_t, **kw), kind="reduce")


@pytest.mark.parametrize("shape,kw", [
    ([2, 3, 6, 7], {"kernel_size": [2, 3]}),
    ([1, 2, 7, 6], {"kernel_size": [3, 2], "dilation": [2, 1], "padding": [1, 2], "stride": [2, 3]}),
    ([3, 5, 5], {"kernel_size": [2, 2], "stride": [1, 2]}),
])
def test_unfold_fold_and_gradients_fp64(shape, kw):
    g = torch.Generator().manual_seed(sum(shape))
    x_t = torch.randn(shape, generator=g, dtype=torch.float64).requires_grad_()
    cols_t = F.unfold(x_t, **kw)
    r = torch.randn(cols_t.shape, generator=g, dtype=torch.float64)
    (want_x,) = torch.autograd.grad((cols_t * r).sum(), x_t)
    x = to_et(x_t).require_grad()
    cols = et.op("unfold", x, **kw)
    same(cols, cols_t)
    (cols * to_et(r)).sum().backward()
    np.testing.assert_allclose(to_torch(x.grad).numpy(), want_x.numpy(), rtol=1e-12, atol=1e-12 * float(want_x.abs().max()))
    # fold is unfold's adjoint: back from the columns to the image, overlaps summed.
    c_t = cols_t.detach().clone().requires_grad_()
    img_t = F.fold(c_t, output_size=shape[-2:], **kw)
    r2 = torch.randn(img_t.shape, generator=g, dtype=torch.float64)
    (want_c,) = torch.autograd.grad((img_t * r2).sum(), c_t)
    c = to_et(c_t).require_grad()
    img = et.op("fold", c, output_size=shape[-2:], **kw)
    same(img, img_t, kind="reduce")
    (img * to_et(r2)).sum().backward()
    np.testing.assert_allclose(to_torch(c.grad).numpy(), want_c.numpy(), rtol=1e-12, atol=1e-12 * float(want_c.abs().max()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fold_overlaps_in_the_dtype(dtype):
    """Overlapping blocks sum in the tensor's dtype, as PyTorch's col2im adds."""
    g = torch.Generator().manual_seed(9)
    c_t = torch.randn(2, 3 * 9, 16, generator=g).to(dtype)
    kw = {"output_size": [6, 6], "kernel_size": [3, 3]}
    same(et.op("fold", to_et(c_t), **kw), F.fold(c_t, **kw), kind="reduce")
    x_t = torch.randn(2, 3, 6, 6, generator=g).to(dtype)
    same(et.op("unfold", to_et(x_t), kernel_size=[3, 3]), F.unfold(x_t, kernel_size=[3, 3]))


def test_refusals_have_the_same_code_on_both_backends():
    x = to_et(torch.randn(1, 2, 3, 4))
    cases = [
        (lambda: interp(x, size=[5, 6], scale_factor=2.0), "E_INVALID_ARG", "only one of size or scale_factor should be defined"),
        (lambda: interp(x), "E_INVALID_ARG", "either size or scale_factor should be defined"),
        (lambda: interp(x, size=[5, 6], align_corners=True), "E_INVALID_ARG", "align_corners option can only be set"),
        (lambda: interp(x, size=[5, 6, 7]), "E_SHAPE", "Input and output must have the same number of spatial dimensions"),
        (lambda: interp(x, size=[5], mode="linear"), "E_SHAPE", "Only 3D, 4D and 5D input Tensors supported (got 4D)"),
        (lambda: interp(x, size=[0, 2]), "E_SHAPE", "Input and output sizes should be greater than 0"),
        (lambda: interp(x, scale_factor=0.1), "E_SHAPE", "Input and output sizes should be greater than 0"),
        (lambda: interp(x, scale_factor=-1.0), "E_INVALID_ARG", "scale_factor must be a positive finite number"),
        (lambda: interp(x, size=[4, 4], mode="bicubic"), "E_UNSUPPORTED", "bicubic"),
        (lambda: interp(x, size=[4, 4], mode="cubic"), "E_INVALID_ARG", "unknown mode cubic"),
        (lambda: interp(x, size=[4, 4], recompute_scale_factor=True), "E_INVALID_ARG", "recompute_scale_factor is not meaningful"),
        (lambda: et.op("unfold", x, kernel_size=[4, 4]), "E_SHAPE", "but its components must be at least one"),
        (lambda: et.op("unfold", x, kernel_size=[2, 2], stride=[0, 1]), "E_INVALID_ARG", "stride should be greater than zero"),
        (lambda: et.op("unfold", x, kernel_size=[2, 2], padding=[-1, 0]), "E_INVALID_ARG", "padding should be non-negative"),
        (lambda: et.op("fold", to_et(torch.randn(1, 5, 9)), output_size=[4, 4], kernel_size=[2, 2]), "E_SHAPE", "divisible by the product of kernel_size"),
        (lambda: et.op("fold", to_et(torch.randn(1, 4, 8)), output_size=[4, 4], kernel_size=[2, 2]), "E_SHAPE", "match the calculated number of sliding blocks 3 * 3 = 9"),
    ]
    for fn, code, words in cases:
        with pytest.raises(et.EnkaiError) as e:
            fn()
        assert e.value.code == code and words in str(e.value), str(e.value)


def test_interpolate_uint8(backend):
    """uint8 images: the nearest modes copy, so both backends equal PyTorch;
    bilinear is libtorch's fixed-point kernel, whose rounding the native
    backend does not reproduce (E_UNSUPPORTED there); linear and trilinear
    are refused as PyTorch refuses them."""
    x_t = torch.randint(0, 256, (1, 3, 5, 6), generator=torch.Generator().manual_seed(2)).to(torch.uint8)
    x = to_et(x_t)
    for kw in ({"size": [9, 4]}, {"scale_factor": 1.7, "mode": "nearest-exact"}):
        same(interp(x, **kw), F.interpolate(x_t, **kw))
    if backend == "torch":
        same(interp(x, size=[7, 8], mode="bilinear"), F.interpolate(x_t, size=[7, 8], mode="bilinear"))
    else:
        with pytest.raises(et.EnkaiError) as e:
            interp(x, size=[7, 8], mode="bilinear")
        assert e.value.code == "E_UNSUPPORTED"
    with pytest.raises(et.EnkaiError) as e:
        interp(to_et(x_t[0]), size=[7], mode="linear")
    assert e.value.code == "E_DTYPE"
    with pytest.raises(et.EnkaiError) as e:
        interp(to_et(x_t.to(torch.int64)), size=[7, 8])
    assert e.value.code == "E_DTYPE"
