"""Every op of the table through the ONNX export, generated from
`enkai_op_schema()` and the table's own cases, on both backends: each case
(fp32, and the dtypes its inputs name) is run under a trace and exported
with its tensor inputs as the graph's inputs; the file must pass
`onnx.checker.check_model`, and onnxruntime's outputs on those inputs must
equal ours. An export may refuse only with `E_UNSUPPORTED` (an op with no
lowering, or an argument the lowering cannot express), never write a
graph that onnxruntime refuses or that computes something else; and every op
the README lists as lowered must export at least one of its cases.

Tolerance (fp32): rtol 1e-4, atol 1e-5 x max(1, max |ours|). onnxruntime's
CPU kernels compute the same formulas in fp32 with their own vectorized
exp/erf/tanh (a few ulps) and their own GEMM and convolution blocking, and
some lowerings are compositions (gelu as erf, rsqrt as 1/sqrt, rms_norm
written out): measured over these cases at most 3e-6 relative apart. Integer
and bool results are exact.
"""

import json
import zlib

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

import enkai_tensor as et  # noqa: E402
import enkai_tensor.onnx  # noqa: E402,F401

pytestmark = pytest.mark.usefixtures("backend")

SCHEMA = et.op_schema()
OPS = sorted({o["name"] for o in SCHEMA})

# The ops the README lists as lowered: each must export at least one case.
LOWERED = """abs acos adaptive_avg_pool2d add addcdiv addcmul all amax amin any arange argmax argmin asin atan
avg_pool2d batch_norm bmm broadcast_to cat ceil celu chunk clamp clone contiguous conv1d conv2d conv_transpose2d cos
cosh cumsum detach div einsum elu embedding eq erf erfc exp exp2 expand expm1 eye flatten flip floor fmod full
full_like gather ge gelu group_norm gt hardsigmoid hardswish hardtanh index_select isfinite isinf isnan l1_loss
layer_norm le leaky_relu lerp linear log log10 log1p log2 log_sigmoid log_softmax logical_and logical_not
logical_or logical_xor logsumexp lt masked_fill matmul max max_pool2d maximum mean min minimum mish mm movedim
mse_loss mul narrow ne neg one_hot ones ones_like pad permute pow prod reciprocal relu repeat reshape rms_norm roll
round rsqrt scaled_dot_product_attention scatter select selu sigmoid sign silu sin sinh softmax softplus sort split
sqrt square squeeze stack std sub sum t tan tanh tile topk tril triu trunc unflatten unsqueeze var view where zeros
zeros_like""".split()


def overloads(name):
    return [o for o in SCHEMA if o["name"] == name]


def array(rng, spec, domain):
    """A numpy input for one case input spec (the table's case format)."""
    if isinstance(spec, dict):
        lo, hi = spec.get("range", [0, 2])
        d, shape = spec.get("dtype", "fp32"), spec["shape"]
        if d == "bool":
            return rng.random(shape) < 0.5
        if d in ("int64", "int32", "uint8"):
            lo, hi = int(np.floor(lo)), int(np.ceil(hi))
            return rng.integers(lo, max(hi, lo + 1), shape).astype({"int64": np.int64, "int32": np.int32, "uint8": np.uint8}[d])
        return rng.uniform(lo, hi, shape).astype(np.float32)
    if domain == "pos":
        return rng.uniform(0.1, 3.0, spec).astype(np.float32)
    if domain == "unit":
        return rng.uniform(-0.9, 0.9, spec).astype(np.float32)
    return rng.normal(0.0, 1.5, spec).astype(np.float32)


def fits(ov, case):
    tensors = [p for p in ov["params"] if p["type"] in ("Tensor", "Tensor[]")]
    other = {p["name"]: p for p in ov["params"] if p["type"] not in ("Tensor", "Tensor[]")}
    kw = case.get("kwargs", {})
    if any(k not in other for k in kw):
        return False
    for k, v in kw.items():
        t = other[k]["type"]
        if (isinstance(v, list) and not t.startswith("int[")) or (isinstance(v, str) and t != "str") \
                or (isinstance(v, int) and not isinstance(v, bool) and t == "int[]") \
                or (isinstance(v, (int, float)) and not isinstance(v, bool) and t == "str"):
            return False
    needed = {n for n, p in other.items() if "default" not in p}
    return len(case["inputs"]) == len(tensors) and needed <= set(kw)


def cases(ov):
    """(input specs, kwargs) for an overload: its table cases, or for an
    elementwise op the shapes every elementwise op is tested with."""
    if ov["pointwise"]:
        n = sum(p["type"] == "Tensor" for p in ov["params"])
        shapes = [[[3, 4]] * n, [[3, 1]] + [[4]] * (n - 1)] if n > 1 else [[[3, 4]], [[]]]
        return [(s, {}) for s in shapes]
    return [(c["inputs"], c.get("kwargs", {})) for c in ov["cases"] if fits(ov, c)]


def flat(xs):
    for x in xs:
        if isinstance(x, list):
            yield from flat(x)
        elif x is not None:
            yield x


def check(got, want, what):
    assert got.shape == want.shape, (what, got.shape, want.shape)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    scale = max(1.0, float(np.nanmax(np.abs(want), initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale, err_msg=what)


def export_case(tmp_path, name, specs, kw, rng, domain):
    """Traces one call, exports it; None when refused with E_UNSUPPORTED,
    else the number of outputs compared."""
    def one(s):
        return None if s is None else np.asarray(array(rng, s, domain))

    def conv(a):
        return None if a is None else et.from_numpy(a)

    arrays = [[one(x) for x in s] if isinstance(s, list) and s and not any(isinstance(v, int) for v in s) else one(s)
              for s in specs]
    ins = [[conv(x) for x in a] if isinstance(a, list) else conv(a) for a in arrays]
    try:
        with et.onnx.trace():
            out = et.op(name, *ins, **kw)
    except et.EnkaiError:
        return 0  # a case the op itself refuses (test_op_table checks those)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    graph_in = list(flat(ins))
    path = tmp_path / f"{name}.onnx"
    try:
        et.onnx.export(str(path), graph_in, outs, {})
    except et.EnkaiError as e:
        assert e.code == "E_UNSUPPORTED", f"{name} {specs} {kw}: {e}"
        assert not path.exists()
        return None
    finally:
        et.onnx.clear()
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
    feed = dict(zip([i.name for i in sess.get_inputs()], list(flat(arrays))))
    got = sess.run(None, feed)
    for i, (g, o) in enumerate(zip(got, outs)):
        check(np.asarray(g), o.numpy(), f"{name} {specs} {kw} output {i}")
    path.unlink()
    return len(got)


@pytest.mark.parametrize("name", [n for n in OPS if not n.endswith("_")])
def test_op_exports_or_is_refused_by_name(name, backend, tmp_path):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    exported = refused = 0
    for ov in overloads(name):
        if backend not in ov["backends"] or ov["domain"] == "own":
            continue
        for specs, kw in cases(ov):
            r = export_case(tmp_path, name, specs, kw, rng, ov["domain"])
            if r is None:
                refused += 1
            elif r:
                exported += 1
    if name in LOWERED:
        assert exported > 0, f"{name} is listed as lowered but no case exported ({refused} refused)"


def test_lowered_list_names_table_ops():
    assert set(LOWERED) <= set(OPS), sorted(set(LOWERED) - set(OPS))
    assert json.loads(json.dumps(LOWERED)) == LOWERED
