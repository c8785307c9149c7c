"""ONNX export (`et.onnx.trace` + `et.onnx.export`) of three models built from
et ops, on both backends: the TinyLM's forward (python/tests/lm_reference.py's
architecture), the digits CNN of test_digits_cnn.py in eval form, and a
Llama decoder block (examples-c/llama_train.c's: rms_norm, rotary roll,
grouped-query scaled_dot_product_attention, SwiGLU).

Oracle: onnx.checker.check_model (full_check: the model, then strict shape
inference over it) on the file, and onnxruntime's CPU provider running it.
Each model is traced at batch 2 and exported with dynamic_batch=True; fresh
random inputs at batch 3 and at batch 2 go to onnxruntime and to our own
forward (untraced), and the two outputs must agree. The parameters must be
initializers under their names with bit-identical values.

Tolerance: rtol 1e-4 with atol 1e-5 times max(1, largest |value|). Both
sides compute in fp32 the same formulas on the same values; they differ only
in summation order and kernel rounding (GEMM/conv blocking, ORT's own
erf/exp/rsqrt and LayerNormalization), a few ulps per op: with reductions of
at most 144 terms and activations of order 1 (outputs up to about 5), that
is about 1e-6 after the deepest model. Measured for these very forwards
against the same models in PyTorch: at most 1.2e-6 (TinyLM), 6e-7 (CNN),
1e-6 (Llama block, against transformers' LlamaDecoderLayer), so the bound
leaves a margin of 10x or more. A wrong
lowering (a transposed weight, a missed mask, a wrong axis, eps, rotary
sign or GQA head mapping, a batch baked into a Reshape) moves outputs by
1e-2 or more, or fails to run at batch 3.
"""

import math

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

import enkai_tensor as et  # noqa: E402
import enkai_tensor.onnx  # noqa: E402,F401  (et.onnx)

pytestmark = pytest.mark.usefixtures("backend")
RTOL, ATOL = 1e-4, 1e-5
TRACE_BATCH = 2


# ---- helpers ----------------------------------------------------------------------------------

def make_params(rng, spec):
    """name -> et.Tensor from (name, shape, kind): "w" a weight with std
    1/sqrt(fan_in) (activations stay of order 1), "e" standard normal, "g" a
    gain near 1, "b" a small bias, "v" a positive variance."""
    out = {}
    for name, shape, kind in spec:
        if kind == "w":
            a = rng.standard_normal(shape) / math.sqrt(np.prod(shape[1:]))  # fan_in: [out, in] or [out, in, kh, kw]
        elif kind == "e":
            a = rng.standard_normal(shape)
        elif kind == "g":
            a = 1 + 0.1 * rng.standard_normal(shape)
        elif kind == "b":
            a = 0.1 * rng.standard_normal(shape)
        else:
            a = rng.uniform(0.5, 1.5, shape)
        out[name] = et.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
    return out


def trace(forward, inputs):
    """Runs forward under et.onnx.trace(); its outputs as a list."""
    with et.onnx.trace():
        outs = forward(*inputs)
    return list(outs) if isinstance(outs, (list, tuple)) else [outs]


def session(path):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1  # tiny models; the suite runs beside other workers
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def assert_close(got, want, what):
    assert got.shape == want.shape, (what, got.shape, want.shape)
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL * scale, err_msg=what)


def check_initializers(model, params):
    """Each parameter is an initializer under its name, with its exact bits."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for name, t in params.items():
        assert name in inits, f"parameter {name} is not an initializer: {sorted(inits)}"
        want, got = t.numpy(), inits[name]
        assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape, want.shape)
        assert got.tobytes() == want.tobytes(), f"{name}'s values differ"


def export_and_compare(tmp_path, forward, params, make_inputs):
    """Traces forward at batch 2, exports with a dynamic batch, checks the
    file and the initializers, then compares onnxruntime with forward on
    fresh inputs at batch 3 and 2. make_inputs(rng, batch) -> numpy arrays."""
    inputs = [et.from_numpy(a) for a in make_inputs(np.random.default_rng(100), TRACE_BATCH)]
    outputs = trace(forward, inputs)
    path = tmp_path / "model.onnx"
    et.onnx.export(str(path), inputs, outputs, params, dynamic_batch=True)
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    check_initializers(model, params)
    sess = session(path)
    names = [i.name for i in sess.get_inputs()]
    assert names == [f"input{i}" for i in range(len(inputs))]
    assert [o.name for o in sess.get_outputs()] == [f"output{i}" for i in range(len(outputs))]
    for batch, seed in ((3, 101), (2, 102)):
        fresh = make_inputs(np.random.default_rng(seed), batch)
        got = sess.run(None, dict(zip(names, fresh)))
        ours = forward(*[et.from_numpy(a) for a in fresh])
        ours = list(ours) if isinstance(ours, (list, tuple)) else [ours]
        assert len(got) == len(ours)
        for i, (g, o) in enumerate(zip(got, ours)):
            assert_close(g, o.numpy(), f"output{i} at batch {batch}")
    return model


# ---- 1. the TinyLM's forward --------------------------------------------------------------------

V, S, D, H, LAYERS, POSITIONS = 50, 8, 32, 4, 2, 16
DH = D // H


def tinylm_spec():
    spec = [("tok_emb", (V, D), "e"), ("pos_emb", (POSITIONS, D), "e")]
    for l in range(LAYERS):
        p = f"layers.{l}."
        spec += [(p + "ln1.weight", (D,), "g"), (p + "ln1.bias", (D,), "b"),
                 (p + "qkv.weight", (3 * D, D), "w"), (p + "qkv.bias", (3 * D,), "b"),
                 (p + "proj.weight", (D, D), "w"), (p + "proj.bias", (D,), "b"),
                 (p + "ln2.weight", (D,), "g"), (p + "ln2.bias", (D,), "b"),
                 (p + "fc1.weight", (4 * D, D), "w"), (p + "fc1.bias", (4 * D,), "b"),
                 (p + "fc2.weight", (D, 4 * D), "w"), (p + "fc2.bias", (D,), "b")]
    return spec + [("ln_f.weight", (D,), "g"), ("ln_f.bias", (D,), "b"),
                   ("head.weight", (V, D), "w"), ("head.bias", (V,), "b")]


def tinylm_forward(p, mask, ids):
    """lm_reference.forward's logits, with W as [out, in] (F.linear's layout)."""
    b, s = ids.shape
    ln = lambda x, n: et.op("layer_norm", x, p[n + ".weight"], p[n + ".bias"], normalized_shape=[D], eps=1e-5)
    lin = lambda x, n: et.op("linear", x, p[n + ".weight"], p[n + ".bias"])
    heads = lambda t: t.reshape(b, s, H, DH).transpose(1, 2)
    x = et.op("embedding", ids, p["tok_emb"]) + p["pos_emb"].slice(0, 0, s)
    for l in range(LAYERS):
        n = f"layers.{l}."
        qkv = lin(ln(x, n + "ln1"), n + "qkv")
        q, k, v = (heads(qkv.slice(2, i * D, (i + 1) * D)) for i in range(3))
        scores = (q @ k.transpose(2, 3)) / math.sqrt(DH)
        att = et.op("softmax", et.op("masked_fill", scores, mask, value=float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, D)
        x = x + lin(y, n + "proj")
        x = x + lin(et.op("gelu", lin(ln(x, n + "ln2"), n + "fc1")), n + "fc2")
    return lin(ln(x, "ln_f"), "head")


def test_tinylm_forward_runs_in_onnxruntime(tmp_path):
    params = make_params(np.random.default_rng(0), tinylm_spec())
    mask = et.from_numpy(np.triu(np.ones((S, S), dtype=bool), 1))  # a constant, not a parameter
    forward = lambda ids: tinylm_forward(params, mask, ids)
    model = export_and_compare(tmp_path, forward, params,
                               lambda rng, b: [rng.integers(0, V, (b, S), dtype=np.int64)])
    dims = model.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims[1:]] == [S, V]


# ---- 2. the digits CNN in eval mode -------------------------------------------------------------

def cnn_spec():
    spec = []
    for i, (cin, cout) in enumerate([(1, 16), (16, 32)], 1):
        spec += [(f"conv{i}.weight", (cout, cin, 3, 3), "w"), (f"conv{i}.bias", (cout,), "b"),
                 (f"bn{i}.weight", (cout,), "g"), (f"bn{i}.bias", (cout,), "b"),
                 (f"bn{i}.running_mean", (cout,), "b"), (f"bn{i}.running_var", (cout,), "v")]
    return spec + [("fc.weight", (10, 128), "w"), ("fc.bias", (10,), "b")]


def cnn_forward(p, x):
    """test_digits_cnn.Net.forward with batch_norm in eval form."""
    for i in (1, 2):
        x = et.op("conv2d", x, p[f"conv{i}.weight"], p[f"conv{i}.bias"], padding=[1, 1])
        x = et.op("batch_norm", x, p[f"bn{i}.running_mean"], p[f"bn{i}.running_var"], p[f"bn{i}.weight"],
                  p[f"bn{i}.bias"], training=False, eps=1e-5)
        x = et.op("max_pool2d", et.op("relu", x), kernel_size=[2, 2])
    return et.op("linear", x.reshape(x.shape[0], 128), p["fc.weight"], p["fc.bias"])


def test_digits_cnn_eval_runs_in_onnxruntime(tmp_path):
    params = make_params(np.random.default_rng(1), cnn_spec())
    export_and_compare(tmp_path, lambda x: cnn_forward(params, x), params,
                       lambda rng, b: [rng.standard_normal((b, 1, 8, 8)).astype(np.float32)])


# ---- 3. a Llama decoder block -------------------------------------------------------------------

NQ, NKV, LDH, INTER, EPS, THETA = 4, 2, 8, 64, 1e-6, 10000.0


def llama_spec():
    return [("input_layernorm.weight", (D,), "g"), ("q_proj.weight", (NQ * LDH, D), "w"),
            ("k_proj.weight", (NKV * LDH, D), "w"), ("v_proj.weight", (NKV * LDH, D), "w"),
            ("o_proj.weight", (D, NQ * LDH), "w"), ("post_attention_layernorm.weight", (D,), "g"),
            ("gate_proj.weight", (INTER, D), "w"), ("up_proj.weight", (INTER, D), "w"),
            ("down_proj.weight", (D, INTER), "w")]


def rope_tables(t, d):
    """llama_train.c's rope_tables: cos, and sin with rotate_half's sign folded in, [t, d]."""
    inv = 1.0 / np.power(np.float32(THETA), np.arange(0, d, 2, dtype=np.float32) / np.float32(d))
    ang = np.arange(t, dtype=np.float32)[:, None] * inv[None, :].astype(np.float32)
    cos = np.concatenate([np.cos(ang), np.cos(ang)], 1).astype(np.float32)
    sin = np.concatenate([-np.sin(ang), np.sin(ang)], 1).astype(np.float32)
    return et.from_numpy(cos), et.from_numpy(sin)


def llama_block(p, cos, sin, h):
    b, s, _ = h.shape
    rms = lambda x, n: et.op("rms_norm", x, p[n + ".weight"], normalized_shape=[D], eps=EPS)
    lin = lambda x, n: et.op("linear", x, p[n + ".weight"])
    # [b, s, n * LDH] -> [b, n, s, LDH]; with 2 kv heads at batch 2 the traced
    # shape [2, 8, 2, 8] has the batch value at dim 2 too, which must stay fixed.
    heads = lambda x, n: x.reshape(b, s, n, LDH).transpose(1, 2)
    rotate = lambda x: x * cos + et.op("roll", x, shifts=[LDH // 2], dims=[-1]) * sin
    a = rms(h, "input_layernorm")
    q = rotate(heads(lin(a, "q_proj"), NQ))
    k = rotate(heads(lin(a, "k_proj"), NKV))
    v = heads(lin(a, "v_proj"), NKV)
    o = et.op("scaled_dot_product_attention", q, k, v, is_causal=True, enable_gqa=True)
    r = h + lin(o.transpose(1, 2).reshape(b, s, NQ * LDH), "o_proj")
    f = rms(r, "post_attention_layernorm")
    return r + lin(et.op("silu", lin(f, "gate_proj")) * lin(f, "up_proj"), "down_proj")


def test_llama_block_runs_in_onnxruntime(tmp_path):
    params = make_params(np.random.default_rng(2), llama_spec())
    cos, sin = rope_tables(S, LDH)  # constants: unnamed initializers
    model = export_and_compare(tmp_path, lambda h: llama_block(params, cos, sin, h), params,
                               lambda rng, b: [rng.standard_normal((b, S, D)).astype(np.float32)])
    assert len(model.graph.initializer) > len(params)  # the rope tables went in as constants


# ---- 4. errors ----------------------------------------------------------------------------------

def tiny(rng):
    """x [2, 4] -> relu(linear(x)) traced; (x, y, params)."""
    params = {"w": et.from_numpy(rng.standard_normal((3, 4)).astype(np.float32)),
              "b": et.from_numpy(rng.standard_normal(3).astype(np.float32))}
    x = et.from_numpy(rng.standard_normal((TRACE_BATCH, 4)).astype(np.float32))
    y = trace(lambda x: et.op("relu", et.op("linear", x, params["w"], params["b"])), [x])[0]
    return x, y, params


def test_an_op_without_onnx_form_is_unsupported_and_writes_nothing(tmp_path):
    rng = np.random.default_rng(3)
    x = et.from_numpy(rng.standard_normal((3, 3)).astype(np.float32))
    eye = et.from_numpy(3 * np.eye(3, dtype=np.float32))
    y = trace(lambda x: et.op("linalg.cholesky", x @ x.transpose(0, 1) + eye), [x])[0]
    path = tmp_path / "chol.onnx"
    with pytest.raises(et.EnkaiError) as ex:
        et.onnx.export(str(path), [x], [y], {})
    code, message = ex.value.code, str(ex.value)
    del ex
    assert code == "E_UNSUPPORTED", message
    assert "cholesky" in message
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary left behind either


def test_opset_below_17_is_invalid(tmp_path):
    x, y, params = tiny(np.random.default_rng(4))
    path = tmp_path / "old.onnx"
    with pytest.raises(et.EnkaiError) as ex:
        et.onnx.export(str(path), [x], [y], params, opset=16)
    code, message = ex.value.code, str(ex.value)
    del ex
    assert code == "E_INVALID_ARG", message
    assert not path.exists()


def test_a_freed_input_is_a_handle_error(tmp_path):
    x, y, params = tiny(np.random.default_rng(5))
    t = et.from_numpy(np.ones((TRACE_BATCH, 4), np.float32))
    h = t.handle
    t.free()
    stale = et.Tensor._from_handle(h)  # a Tensor object still naming the freed handle
    path = tmp_path / "stale.onnx"
    try:
        with pytest.raises(et.EnkaiError) as ex:
            et.onnx.export(str(path), [stale], [y], params)
        code, message = ex.value.code, str(ex.value)
        del ex
    finally:
        stale.handle = 0  # not freed again at collection
    assert code.startswith("E_HANDLE_"), message
    assert not path.exists()


# ---- 5. static vs dynamic batch -----------------------------------------------------------------

def test_batch_is_fixed_unless_dynamic_and_names_are_given(tmp_path):
    rng = np.random.default_rng(6)
    x2, x3 = (rng.standard_normal((b, 4)).astype(np.float32) for b in (2, 3))

    x, y, params = tiny(np.random.default_rng(7))
    static = tmp_path / "static.onnx"
    et.onnx.export(str(static), [x], [y], params)
    model = onnx.load(str(static))
    onnx.checker.check_model(model, full_check=True)
    check_initializers(model, params)
    dims = next(i for i in model.graph.input if i.name == "input0").type.tensor_type.shape.dim
    assert dims[0].dim_value == TRACE_BATCH and not dims[0].HasField("dim_param")
    assert dims[1].dim_value == 4
    assert [o.name for o in model.graph.output] == ["output0"]
    sess = session(static)
    with pytest.raises(Exception, match="dimension"):
        sess.run(None, {"input0": x3})  # onnxruntime refuses batch 3 for a fixed batch of 2
    fwd = lambda t: et.op("relu", et.op("linear", t, params["w"], params["b"]))
    assert_close(sess.run(None, {"input0": x2})[0], fwd(et.from_numpy(x2)).numpy(), "static, batch 2")

    x, y, params = tiny(np.random.default_rng(7))  # a fresh trace for the second export
    dynamic = tmp_path / "dynamic.onnx"
    et.onnx.export(str(dynamic), [x], [y], params, dynamic_batch=True, input_names=["x"], output_names=["y"])
    model = onnx.load(str(dynamic))
    onnx.checker.check_model(model, full_check=True)
    check_initializers(model, params)
    dims = next(i for i in model.graph.input if i.name == "x").type.tensor_type.shape.dim
    assert dims[0].HasField("dim_param") and dims[0].dim_param
    assert dims[1].dim_value == 4
    assert [o.name for o in model.graph.output] == ["y"]
    assert model.graph.output[0].type.tensor_type.shape.dim[0].HasField("dim_param")
    sess = session(dynamic)
    assert [i.name for i in sess.get_inputs()] == ["x"]
    fwd = lambda t: et.op("relu", et.op("linear", t, params["w"], params["b"]))
    for a in (x3, x2):
        assert_close(sess.run(["y"], {"x": a})[0], fwd(et.from_numpy(a)).numpy(), f"dynamic, batch {len(a)}")
