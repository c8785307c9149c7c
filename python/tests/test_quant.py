"""Weight-only int8 quantization (README "Quantized tensors").

Oracles:
- qint8: `torch.quantize_per_channel(x, scales, zeros, axis, torch.qint8)`
  with the scales the ABI defines (fp32 max|slice| / 127), compared bit for
  bit: its int representation, its dequantized values, the scales;
- q8_0: ggml's `quantize_row_q8_0_ref`, written below in numpy (d = amax/127
  in fp32, stored as fp16; q = roundf(x * (1/d)), ties away from zero), and
  ggml's `block_q8_0` bytes, compared bit for bit;
- quantized linear/matmul: the float64 product of the activation and the
  dequantized weight, within the activation's quantization bound (below);
  its gradient: torch.autograd of `x @ Wd.T` (fp32 tolerance).

The bound. The activation is quantized symmetrically per row (qint8
weight) or per block of 32 (q8_0): x = sx*qx + e with |e| <= sx/2 elementwise,
the int8 products are exact, so |y - x·Wd| <= Σ_k |e_k||Wd_k| <= (sx/2)·Σ_k
|Wd_k| per output (per block for q8_0), plus the fp32 rounding of the
rescale and the sum: we allow 1e-5 relative to Σ|x||Wd| on top.
"""

import json

import numpy as np
import pytest
import torch

import enkai_tensor as et
from enkai_tensor import safetensors as st

pytestmark = [pytest.mark.usefixtures("backend"),
              pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")]


def rand(shape, seed, scale_rows=True):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 1.0, shape).astype(np.float32)
    if scale_rows and len(shape) >= 1:
        # Slices of very different magnitudes, so that each gets a scale of its own.
        x *= np.exp(rng.uniform(-3, 3, shape[:1] + (1,) * (len(shape) - 1))).astype(np.float32)
    return x


def code(fn):
    with pytest.raises(et.EnkaiError) as e:
        fn()
    return e.value.code


# ---------------------------------------------------------------- qint8


@pytest.mark.parametrize("shape,axis", [((8, 64), 0), ((8, 64), 1), ((4, 6, 5), 1), ((4, 6, 5), -1), ((3, 2, 7), 0), ((7,), 0)])
def test_per_channel_equals_torch(shape, axis):
    x = rand(shape, 1)
    q = et.quantize_per_channel(et.from_numpy(x), axis)
    assert q.dtype == "qint8" and q.shape == shape and q.device == "cpu"
    ax = axis % len(shape)
    red = tuple(d for d in range(len(shape)) if d != ax)
    scales = (np.abs(x).max(axis=red) if red else np.abs(x)) / np.float32(127)
    np.testing.assert_array_equal(et.q_scales(q).numpy(), scales.astype(np.float32))
    ref = torch.quantize_per_channel(torch.from_numpy(x), torch.from_numpy(scales.astype(np.float64)),
                                     torch.zeros(shape[ax], dtype=torch.int64), ax, torch.qint8)
    np.testing.assert_array_equal(q.numpy(), ref.int_repr().numpy())
    np.testing.assert_array_equal(et.dequantize(q).numpy(), ref.dequantize().numpy())
    assert q.to_bytes() == ref.int_repr().numpy().tobytes()


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp64"])
def test_per_channel_reads_other_float_dtypes_as_fp32(dtype):
    x = et.from_numpy(rand((5, 40), 2)).to_dtype(dtype)
    q = et.quantize_per_channel(x, 0)
    ref = et.quantize_per_channel(x.to_dtype("fp32"), 0)
    assert q.to_bytes() == ref.to_bytes()
    np.testing.assert_array_equal(et.q_scales(q).numpy(), et.q_scales(ref).numpy())


def test_zero_slices_quantize_to_zero_with_scale_zero():
    x = rand((4, 32), 3)
    x[2] = 0
    q = et.quantize_per_channel(et.from_numpy(x), 0)
    assert et.q_scales(q).numpy()[2] == 0
    d = et.dequantize(q).numpy()
    assert (d[2] == 0).all() and np.isfinite(d).all()


# ---------------------------------------------------------------- q8_0


def ggml_q8_0(x):
    """ggml's quantize_row_q8_0_ref and its block_q8_0 bytes, in numpy."""
    blocks = x.reshape(-1, 32).astype(np.float32)
    amax = np.abs(blocks).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = (blocks * inv[:, None]).astype(np.float32).astype(np.float64)
    q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int8)  # roundf: ties away from zero
    d16 = d.astype(np.float16)
    raw = b"".join(d16[i:i + 1].astype("<f2").tobytes() + q[i].tobytes() for i in range(len(q)))
    deq = (d16.astype(np.float32)[:, None] * q.astype(np.float32)).reshape(x.shape)
    return raw, deq, d16.astype(np.float32)


@pytest.mark.parametrize("shape", [(32,), (4, 64), (2, 3, 96)])
def test_q8_0_equals_ggml_reference(shape):
    x = rand(shape, 4)
    x.reshape(-1)[5] = 0.5  # exact halves of the scale somewhere are likely, not certain: force ties below
    q = et.quantize_q8_0(et.from_numpy(x))
    raw, deq, d = ggml_q8_0(x)
    assert q.dtype == "q8_0" and q.shape == shape
    assert q.to_bytes() == raw
    np.testing.assert_array_equal(et.dequantize(q).numpy(), deq)
    np.testing.assert_array_equal(et.q_scales(q).numpy().reshape(-1), d)


def test_q8_0_rounds_ties_away_from_zero():
    # Block max 127 gives d = 1 and id = 1: x*id is x itself, so the halves are ties.
    x = np.zeros(32, np.float32)
    x[0], x[1:9] = 127, [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5, -126.5]
    q = et.quantize_q8_0(et.from_numpy(x))
    raw, _, _ = ggml_q8_0(x)
    assert q.to_bytes() == raw
    assert list(np.frombuffer(q.to_bytes()[2:11], np.int8)) == [127, 1, -1, 2, -2, 3, -3, 127, -127]


# ---------------------------------------------------------------- products


def dequantized(w, scheme, axis):
    q = et.quantize_per_channel(et.from_numpy(w), axis) if scheme == "qint8" else et.quantize_q8_0(et.from_numpy(w))
    return q, et.dequantize(q).numpy().astype(np.float64)


def act_err(x, scheme):
    """Per row (qint8) or per block of 32 (q8_0) of x: half its quantization step, as the kernel quantizes it."""
    x2 = x.reshape(-1, x.shape[-1]).astype(np.float32)
    if scheme == "qint8":
        return np.repeat((np.abs(x2).max(axis=1) / np.float32(127) / 2)[:, None], x2.shape[1], axis=1).astype(np.float64)
    b = x2.reshape(x2.shape[0], -1, 32)
    return np.repeat(np.abs(b).max(axis=2) / np.float32(127) / 2, 32, axis=1).reshape(x2.shape).astype(np.float64)


def check_bound(y, x, wd_nk, b, scheme):
    """`y` (float32) against x @ wd_nkᵀ + b in float64, within the activation bound."""
    x2 = x.reshape(-1, x.shape[-1]).astype(np.float64)
    ref = x2 @ wd_nk.T + (0 if b is None else b.astype(np.float64))
    bound = act_err(x, scheme) @ np.abs(wd_nk).T + 1e-5 * (np.abs(x2) @ np.abs(wd_nk).T) + 1e-6
    err = np.abs(y.reshape(ref.shape).astype(np.float64) - ref)
    assert (err <= bound).all(), f"worst {np.max(err - bound)} over the bound; max err {err.max()}"
    # The int8 path really ran: a float product would be far closer than the bound allows.
    assert err.max() > 0


@pytest.mark.parametrize("scheme", ["qint8", "q8_0"])
@pytest.mark.parametrize("m,k,n", [(1, 64, 48), (5, 96, 33), (37, 256, 70), (3, 32, 1)])
def test_linear_within_the_activation_bound(scheme, m, k, n):
    w, x, b = rand((n, k), 5), rand((m, k), 6), rand((n,), 7)
    q, wd = dequantized(w, scheme, 0)
    y = et.op("linear", et.from_numpy(x), q, et.from_numpy(b))
    assert y.dtype == "fp32" and y.shape == (m, n)
    check_bound(y.numpy(), x, wd, b, scheme)
    y0 = et.op("linear", et.from_numpy(x), q)
    check_bound(y0.numpy(), x, wd, None, scheme)


def test_matmul_and_enkai_linear_take_in_out_weights():
    w, x, b = rand((64, 40), 8, scale_rows=False), rand((2, 3, 64), 9), rand((40,), 10)
    q, wd = dequantized(w, "qint8", 1)  # [in, out], a scale per output column
    y = et.matmul(et.from_numpy(x), q)
    assert y.shape == (2, 3, 40)
    check_bound(y.numpy(), x, wd.T, None, "qint8")
    y = et.linear(et.from_numpy(x), q, et.from_numpy(b))
    check_bound(y.numpy(), x, wd.T, b, "qint8")


def test_half_activations_and_3d_inputs():
    w, x = rand((16, 64), 11), rand((2, 4, 64), 12)
    q, wd = dequantized(w, "q8_0", 0)
    xb = et.from_numpy(x).to_dtype("bf16")
    y = et.op("linear", xb, q)
    assert y.dtype == "fp32" and y.shape == (2, 4, 16)
    check_bound(y.numpy(), xb.to_dtype("fp32").numpy(), wd, None, "q8_0")


def test_non_finite_activations_give_nan_rows():
    w, x = rand((8, 32), 13), rand((3, 32), 14)
    x[1, 4] = np.nan
    x[2, 0] = np.inf
    y = et.op("linear", et.from_numpy(x), et.quantize_per_channel(et.from_numpy(w), 0)).numpy()
    assert np.isfinite(y[0]).all() and np.isnan(y[1]).all() and np.isnan(y[2]).all()


@pytest.mark.parametrize("scheme", ["qint8", "q8_0"])
def test_activation_gradient_is_straight_through(scheme):
    w, x, b, g = rand((24, 64), 15), rand((6, 64), 16), rand((24,), 17), rand((6, 24), 18)
    q, wd = dequantized(w, scheme, 0)
    xe, be = et.from_numpy(x).requires_grad_(), et.from_numpy(b).requires_grad_()
    y = et.op("linear", xe, q, be)
    (y * et.from_numpy(g)).sum().backward()
    xt, bt = torch.from_numpy(x).double().requires_grad_(), torch.from_numpy(b).double().requires_grad_()
    ((xt @ torch.from_numpy(wd).T + bt) * torch.from_numpy(g).double()).sum().backward()
    np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-5 * np.abs(xt.grad.numpy()).max())
    np.testing.assert_allclose(be.grad.numpy(), bt.grad.numpy(), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- refusals


def test_refusals():
    x = et.from_numpy(rand((4, 64), 19))
    q = et.quantize_per_channel(x, 0)
    assert code(lambda: et.op("add", q, x)) == "E_DTYPE"
    assert code(lambda: q + x) == "E_DTYPE"
    assert code(lambda: et.op("linear", x, et.quantize_per_channel(x, 1))) == "E_UNSUPPORTED"  # scales along the input dim
    assert code(lambda: et.matmul(x, et.quantize_q8_0(et.from_numpy(rand((64, 64), 20))))) == "E_UNSUPPORTED"
    assert code(lambda: et.op("linear", et.from_numpy(rand((4, 63), 21)), q)) == "E_SHAPE"
    assert code(lambda: et.op("linear", x, q, et.from_numpy(rand((5,), 22)))) == "E_SHAPE"
    assert code(lambda: et.quantize_q8_0(et.from_numpy(rand((4, 33), 23)))) == "E_SHAPE"
    assert code(lambda: et.quantize_per_channel(x, 2)) == "E_SHAPE"
    assert code(lambda: et.quantize_per_channel(et.tensor([1, 2]), 0)) == "E_DTYPE"
    assert code(lambda: et.quantize_per_channel(et.tensor([[1.0, float("nan")]]), 0)) == "E_INVALID_ARG"
    assert code(lambda: et.quantize_q8_0(et.from_numpy(np.full(32, 1e7, np.float32)))) == "E_INVALID_ARG"
    assert code(lambda: et.dequantize(x)) == "E_HANDLE_KIND"
    assert code(lambda: q.requires_grad_()) == "E_DTYPE"
    h = q.handle
    q.free()
    assert code(lambda: et.Tensor.borrow(h)) == "E_HANDLE_STALE"


def test_live_counters_count_quantized_tensors():
    before = et.live()["tensors"]
    q = et.quantize_q8_0(et.from_numpy(rand((2, 32), 24)))
    assert et.live()["tensors"] == before + 1
    q.free()
    assert et.live()["tensors"] == before


# ---------------------------------------------------------------- files


def test_safetensors_round_trip_and_the_reference_reads_the_parts(tmp_path):
    import safetensors.numpy

    w = rand((8, 64), 25)
    qa, qb = et.quantize_per_channel(et.from_numpy(w), 0), et.quantize_q8_0(et.from_numpy(w))
    plain = et.from_numpy(rand((3,), 26))
    path = tmp_path / "q.safetensors"
    st.save_file({"a.weight": qa, "b.weight": qb, "bias": plain}, path)
    back = st.load_file(path)
    assert sorted(back) == ["a.weight", "b.weight", "bias"]
    for name, q in (("a.weight", qa), ("b.weight", qb)):
        assert back[name].dtype == q.dtype and back[name].shape == q.shape
        assert back[name].to_bytes() == q.to_bytes()
        np.testing.assert_array_equal(et.dequantize(back[name]).numpy(), et.dequantize(q).numpy())
    ref = safetensors.numpy.load_file(str(path))
    np.testing.assert_array_equal(ref["a.weight"], qa.numpy())
    np.testing.assert_array_equal(ref["a.weight.scale"], et.q_scales(qa).numpy())
    assert ref["b.weight"].dtype == np.uint8 and ref["b.weight"].tobytes() == qb.to_bytes()
    with st.safe_open(path) as f:
        listed = json.loads(f.metadata()["enkai.quantized"])
    assert listed["a.weight"] == {"dtype": "qint8", "shape": [8, 64], "axis": 0}
    assert listed["b.weight"] == {"dtype": "q8_0", "shape": [8, 64]}


def test_safetensors_refuses_a_name_its_scales_would_take(tmp_path):
    q = et.quantize_per_channel(et.from_numpy(rand((2, 4), 27)), 0)
    assert code(lambda: st.save_file({"w": q, "w.scale": et.zeros([2])}, tmp_path / "x.safetensors")) == "E_INVALID_ARG"
    assert not (tmp_path / "x.safetensors").exists()


def test_checkpoint_round_trip(tmp_path):
    w = et.from_numpy(rand((4, 32), 28)).requires_grad_()
    qa, qb = et.quantize_per_channel(w, 0), et.quantize_q8_0(w)
    et.checkpoint_save(tmp_path / "ck", [w, qa, qb])
    params, opt, _ = et.checkpoint_load(tmp_path / "ck")
    assert [p.dtype for p in params] == ["fp32", "qint8", "q8_0"]
    np.testing.assert_array_equal(params[0].numpy(), w.numpy())
    for got, want in zip(params[1:], (qa, qb)):
        assert got.shape == want.shape and got.to_bytes() == want.to_bytes()
        np.testing.assert_array_equal(et.dequantize(got).numpy(), et.dequantize(want).numpy())
