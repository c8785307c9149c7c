"""The op table's oracle suite, generated from `enkai_op_schema()`: every
op's values and gradients against PyTorch (`torch.ops.aten.<overload>`,
the very operator `torch.<name>` runs), on both backends, over shapes
(0-dim, empty, broadcast, transposed, sliced with a step), every dtype, and
keyword arguments at and off their defaults. A dtype PyTorch refuses must be
refused here too.

Tolerances, by result dtype:
- integer, bool and comparison results: exact;
- fp64: rtol 1e-10 (libm and SLEEF differ by an ulp or two);
- fp32: rtol 1e-5, atol 1e-6 (the same, in single precision);
- fp16: rtol 2e-3, bf16: rtol 1.6e-2: both compute in fp32 and round once,
  so results differ by at most one rounding of the storage type.
Gradients use the same classes, with atol scaled by the gradient's size.
Recurrent ops are looser (LOOSE; in half precision check_no_worse_than_torch): a recurrence compounds one
rounding per op, step and layer, in another order than PyTorch's (its gates
are one addmm). Measured over 40 seeds of the 2-layer bidirectional case
against fp64: fp32 gru values, ours 3.3e-6 off and PyTorch's own 2.6e-6;
their input gradients (up to 33) both up to 8.7e-5 off, 1.6e-5 apart (atol x40);
in half precision the recurrent ops are held to the fp64 result on the
same inputs instead (check_no_worse_than_torch).
One op is looser (LOOSE): attention's softmax over products of inputs of
std 1.5 amplifies rounding, so two fp32 evaluations differ by more than one
ulp: measured over 300 seeds of its float-mask case, PyTorch's own fp32
gradient is 4.5e-6 off its fp64 one, and ours 4.5e-6.
"""

import gc
import inspect
import json
import zlib

import numpy as np
import pytest
import torch

import enkai_tensor as et

pytestmark = pytest.mark.usefixtures("backend")

SCHEMA = et.op_schema()
OPS = sorted({o["name"] for o in SCHEMA})
DTYPES = {"fp32": torch.float32, "fp64": torch.float64, "fp16": torch.float16, "bf16": torch.bfloat16,
          "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
          "bool": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}
TOL = {"fp64": (1e-10, 1e-12), "fp32": (1e-5, 1e-6), "fp16": (2e-3, 1e-3), "bf16": (1.6e-2, 1e-2)}
# Off-default values for string arguments (numbers and bools are varied generically).
STR_CHOICES = {"approximate": ["tanh"], "rounding_mode": ["trunc", "floor"], "reduce": ["sum", "prod"],
               "reduction": ["none", "sum"]}
# Integer arguments without a default, by name, and the values tried.
INT_CHOICES = {"decimals": [0, 1, -1]}


def overloads(name):
    return [o for o in SCHEMA if o["name"] == name]


def values(rng, shape, dtype, domain):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in ("int64", "int32", "int16", "int8"):
        return rng.integers(-5, 6, shape).astype(dtype)
    if dtype == "uint8":
        return rng.integers(0, 11, shape).astype(np.uint8)
    if domain == "pos":
        v = rng.uniform(0.1, 3.0, shape)
    elif domain == "unit":
        v = rng.uniform(-0.9, 0.9, shape)
    else:
        v = rng.normal(0.0, 1.5, shape)
    return v.astype(np.float64 if dtype == "fp64" else np.float32)


def pair(a, dtype, layout):
    """The same values as (ours, torch's), laid out as `layout` says."""
    a = np.array(a, order="C")  # keeps a 0-dim array 0-dim (ascontiguousarray makes it 1-dim)
    t = torch.from_numpy(a.copy())
    ours = et.from_numpy(a)
    if dtype in ("fp16", "bf16"):
        t = t.to(DTYPES[dtype])
        ours = ours.to_dtype(dtype)
    if layout == "transposed":
        t, ours = t.t(), ours.transpose(0, 1)
    elif layout == "stepped":
        t, ours = t[:, ::2], ours.slice(1, 0, a.shape[1], 2)
    return ours, t


def base_shape(shape, layout):
    if layout == "transposed":
        return [shape[1], shape[0]]
    if layout == "stepped":
        return [shape[0], shape[1] * 2]
    return shape


def to_numpy(t):
    if isinstance(t, torch.Tensor):
        if t.dtype in (torch.float16, torch.bfloat16):
            t = t.float()
        return t.detach().numpy()
    if t.dtype in ("fp16", "bf16"):
        t = t.to_dtype("fp32")
    return t.numpy()


# Ops whose fp32/fp64 atol is this many times the class's (the docstring says why).
# group_norm: over 300 random [3, 6] two-group cases PyTorch's own fp32 input
# gradient was 2.0e-5 (relative to its largest element) from its fp64 one:
# a group of three values normalises with a large invstd, which amplifies
# the rounding of the centred sums.
# einsum: a chain of products reaches values near 100 where another
# result cancels to 0.2; the same order summed by another GEMM differs by
# an ulp of the terms (5.7e-6 on ij,jk,kl,lm->im in fp32, hash seed 15).
LOOSE = {"scaled_dot_product_attention": 20, "lstm": 40, "gru": 40, "group_norm": 20, "einsum": 20}
# Ops whose fp16/bf16 atol is this many times the class's. batch_norm: PyTorch's CPU kernel for a non-contiguous half input (the
# "transposed" layout) rounds more than its contiguous one: against an fp64
# reference over 300 random [4, 3] eval calls its error (relative to 1+|y|)
# was 0.0164 for bf16 (contiguous: 0.0034) and 0.0017 for fp16 (0.0004);
# the native kernel rounds once, so the difference is PyTorch's own.
# conv_transpose2d: PyTorch's CPU fp16 kernel depends on the machine. The
# native one reproduces slow_conv_transpose2d, whose col2im accumulates in
# fp16; on this CI machine PyTorch 2.13 rounds once instead (its error against
# fp64, relative to 1+|y|, was 0.00045 over 300 random [2,3,4,5]x[3,2,3,3]
# calls, and ours 0.0076, so 11 of 30 hash seeds failed atol 0.001).
# interpolate: PyTorch's CPU bf16 linear (1-d) kernel rounds its weights to
# bf16; against fp64 (relative to 1+|y|) its error over 300 random [2,3,4]
# -> 9 calls was 0.017, rounding once 0.0031 (what native does). Over 20000
# calls with the test's N(0, 1.5) values the two were at most 1.67x atol
# apart beyond rtol; CI failed one case (1.17x) at 1x.
LOOSE_HALF = {"batch_norm": 4, "conv_transpose2d": 8, "interpolate": 3}
# Recurrent ops in half precision are held to the fp64 result instead
# (check_no_worse_than_torch): no further from it than PyTorch's own.
RECURRENT = {"lstm", "gru", "lstm_cell", "gru_cell"}
RECURRENT_HALF = {"bf16": 0.25, "fp16": 0.04}


# PyTorch backward failures of defined derivatives, by op: the error's words.
# group_norm with a bias and no weight: "tensor does not have a device"
# (torch 2.13); test_norms.py checks that gradient against weight = ones.
TORCH_BACKWARD_BUGS = {"group_norm": ("tensor does not have a device",)}
# Calls the native backend states it does not run (E_UNSUPPORTED) where
# libtorch has a kernel it does not reproduce, by (op, dtype).
NATIVE_GAPS = {("interpolate", "uint8"): "a linear mode: libtorch's fixed-point uint8 kernel rounds its own way"}


def check_close(ours, ref, what, loose=1, scaled=False):
    """`ours` equals PyTorch's `ref` within TOL; `scaled` (gradients, sums of
    many terms that may cancel) takes atol relative to the largest |ref|
    when that is above 1, as a sum's rounding grows with its terms."""
    assert NAMES[ref.dtype] == ours.dtype, f"{what}: dtype {ours.dtype}, torch {ref.dtype}"
    assert tuple(ours.shape) == tuple(ref.shape), f"{what}: shape {ours.shape}, torch {tuple(ref.shape)}"
    a, b = to_numpy(ours), to_numpy(ref)
    if ours.dtype in TOL:
        rtol, atol = TOL[ours.dtype]
        if scaled and b.size and np.isfinite(b).any():
            atol *= max(1.0, float(np.nanmax(np.abs(b[np.isfinite(b)]))))
        atol = atol * loose if ours.dtype in ("fp32", "fp64") else atol * LOOSE_HALF.get(what.split()[0].split(".")[0], 1)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(a, b, err_msg=what)


def kwarg_variants(ov):
    """Each non-tensor argument with a default, once off it (one at a time);
    arguments without a default (`div`'s `rounding_mode`) take each of their values."""
    base = [{}]
    for p in ov["params"]:
        if "default" in p or p["type"] in ("Tensor", "Tensor[]"):
            continue
        if p["name"] in STR_CHOICES or p["name"] in INT_CHOICES:
            choices = STR_CHOICES.get(p["name"]) or INT_CHOICES[p["name"]]
            base = [dict(b, **{p["name"]: c}) for b in base for c in choices]
        elif p["optional"]:
            base = [dict(b, **{p["name"]: None}) for b in base]
        else:
            return []
    out = list(base)
    for p in ov["params"]:
        if "default" not in p or p["type"] in ("Tensor", "Tensor[]", "ScalarType"):
            continue
        d = p["default"]
        if p["type"] == "bool":
            out.append({p["name"]: not d})
        elif p["type"] in ("Scalar", "float") and d is not None:
            out.append(dict(base[0], **{p["name"]: (d * 0.5 + 0.25) if d else 0.5}))
        elif p["type"] in ("Scalar", "float"):
            out.append(dict(base[0], **{p["name"]: 0.5}))
        elif p["type"] == "str" and p["name"] in STR_CHOICES:
            out.extend(dict(base[0], **{p["name"]: c}) for c in STR_CHOICES[p["name"]])
    return out


def _rnn(fn, pair):
    """torch.lstm/gru (and their cells) with the ABI's flattened hidden
    state (`h0`, `c0` for lstm's `hx` list) and nn.LSTM's flag defaults."""
    def call(input, *, params=None, has_biases=True, num_layers=1, dropout=0.0, train=False, bidirectional=False,
             batch_first=False, **t):
        hx = [t.pop("h0"), t.pop("c0")] if pair else t.pop("hx")
        if params is None:  # a cell: (input, hx, w_ih, w_hh, b_ih, b_hh)
            return fn(input, hx, **t)
        return fn(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    return call


# Rows with a functional signature that torch.nn.functional does not have:
# the torch function they stand for.
FUNCTIONAL = {"lstm": _rnn(torch.lstm, True), "gru": _rnn(torch.gru, False), "lstm_cell": _rnn(torch.lstm_cell, True)}


def einsum_in_our_order(equation, tensors, path=None):
    """`aten.einsum` handed the contraction order the library plans, as
    `torch.einsum` hands it opt_einsum's: each pairwise contraction rounds
    its result, so in half precision two orders differ by more than the
    class tolerance where a sum cancels (up to 5% of the largest value in
    bf16, measured over 200 seeds of ab,bc,cd,de->ae, for either order);
    in the same order the results agree."""
    if path is None and len(tensors) >= 3:
        path = [i for p in et.einsum_path(equation, *[t.shape for t in tensors])["path"] for i in p]
    return torch.ops.aten.einsum.default(equation, tensors, path=path)


def aten(ov):
    """PyTorch's operator of an overload, taking the schema's (Python) keyword
    names; for a layer or loss with `torch.nn.functional`'s signature
    (`python`), that function."""
    if ov["name"] == "einsum":
        return einsum_in_our_order
    if ov.get("python", "").startswith("torch.") and ov["name"] in FUNCTIONAL:
        return FUNCTIONAL[ov["name"]]
    if "python" in ov:
        return getattr(torch.nn.functional, ov["python"].rpartition(".")[2])
    name, _, overload = ov["overload"].partition(".")
    fn = getattr(getattr(torch.ops.aten, name), overload or "default")
    renames = {p["name"]: p["aten"] for p in ov["params"] if "aten" in p}
    # A dtype argument is our name ("fp32") in the case, torch's dtype for torch.
    dtypes = {p["name"] for p in ov["params"] if p["type"] == "ScalarType"}
    if not renames and not dtypes:
        return fn
    return lambda *a, **kw: fn(*a, **{renames.get(k, k): DTYPES.get(v, v) if k in dtypes else v for k, v in kw.items()})


def run_both(ov, ours_in, torch_in, kw):
    ref = aten(ov)(*torch_in, **kw)
    got = et.op(ov["name"], *ours_in, **kw)
    return got, ref


def pointwise_cases(ov):
    """(tensor-input shapes, layout) for an elementwise overload."""
    n = sum(p["type"] == "Tensor" for p in ov["params"])
    if n == 1:
        return [([[3, 4]], "contiguous"), ([[]], "contiguous"), ([[0, 3]], "contiguous"),
                ([[3, 4]], "transposed"), ([[3, 4]], "stepped")]
    return [([[3, 4]] * n, "contiguous"), ([[3, 1]] + [[4]] * (n - 1), "contiguous"),
            ([[]] + [[3, 4]] * (n - 1), "contiguous"), ([[3, 4]] * n, "transposed")]


def refusal(fn):
    try:
        return fn(), None
    except (RuntimeError, NotImplementedError, TypeError, IndexError, ValueError) as e:
        return None, e


@pytest.mark.parametrize("name", [n for n in OPS if all(o["pointwise"] for o in overloads(n))])
def test_pointwise_op(name, backend):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    checked = 0
    for ov in overloads(name):
        if backend not in ov["backends"] or ov["domain"] == "own":
            continue
        for shapes, layout in pointwise_cases(ov):
            for dtype in DTYPES:
                arrays = [values(rng, base_shape(s, layout) if len(s) == 2 else s, dtype, ov["domain"]) for s in shapes]
                pairs = [pair(a, dtype, layout if len(a.shape) == 2 else "contiguous") for a in arrays]
                ours_in, torch_in = [p[0] for p in pairs], [p[1] for p in pairs]
                for kw in kwarg_variants(ov):
                    what = f"{ov['overload']} {dtype} {shapes} {layout} {kw}"
                    ref, err = refusal(lambda: aten(ov)(*torch_in, **kw))
                    if err is not None:
                        with pytest.raises(et.EnkaiError) as e:
                            et.op(name, *ours_in, **kw)
                        # E_SHAPE: an in-place form whose inputs broadcast past self.
                        assert e.value.code in ("E_DTYPE", "E_TORCH", "E_INVALID_ARG", "E_SHAPE"), f"{what}: {e.value}"
                        continue
                    got = et.op(name, *ours_in, **kw)
                    check_close(got, ref, what)
                    if name.endswith("_"):
                        check_close(ours_in[0], torch_in[0], f"self of {what}")
                    checked += 1
    assert checked > 0


# Other ops' gradients are checked over their cases (check_case_grad).
@pytest.mark.parametrize("name", [n for n in OPS if any(o["differentiable"] and o["pointwise"] for o in overloads(n))])
def test_gradient(name, backend):
    """d(sum(op(x) * w))/dx against torch.autograd.grad, for each floating input."""
    rng = np.random.default_rng(7)
    checked = 0
    for ov in overloads(name):
        if backend not in ov["backends"] or ov["domain"] == "own" or not ov["pointwise"]:
            continue
        n = sum(p["type"] == "Tensor" for p in ov["params"])
        for dtype in ("fp32", "fp64"):
            for kw in kwarg_variants(ov):
                arrays = [values(rng, [3, 4], dtype, ov["domain"]) for _ in range(n)]
                t_in = [torch.from_numpy(a).requires_grad_() for a in arrays]
                o_in = [et.from_numpy(a).require_grad() for a in arrays]
                w = values(rng, [3, 4], dtype, "any")
                ref, err = refusal(lambda: aten(ov)(*nonleaf(name, t_in), **kw))
                if err is not None or not ref.dtype.is_floating_point:
                    continue
                grads = torch.autograd.grad((ref * torch.from_numpy(w)).sum(), t_in, allow_unused=True)
                got = et.op(name, *nonleaf(name, o_in), **kw)
                (got * et.from_numpy(w)).sum().backward()
                for i, (g_ref, x) in enumerate(zip(grads, o_in)):
                    what = f"grad {i} of {ov['overload']} {dtype} {kw}"
                    if g_ref is None:
                        continue
                    check_close(x.grad, g_ref, what)
                    checked += 1
    assert checked > 0


def nonleaf(name, inputs):
    """An in-place form writes into self: a non-leaf copy (`x.clone()`)
    stands for the leaf, whose gradient then flows through the in-place op."""
    if not name.endswith("_") or inputs[0] is None:
        return list(inputs)
    return [inputs[0].clone()] + list(inputs[1:])


def test_schema_covers_both_backends():
    """The table's backends, as the schema reports them, are the backends this build runs."""
    for ov in SCHEMA:
        assert ov["backends"], ov["overload"]
        assert set(ov["backends"]) <= set(et.backend_list()), ov


def test_every_overload_is_an_aten_operator_with_its_parameters():
    """Every overload of the table names a PyTorch operator whose arguments
    begin with the row's parameters, in order: the torch backend's boxed call
    passes them positionally, and the rest take the operator's defaults. A
    parameter may carry its Python name where ATen's differs (`aten`). A
    functional signature (`python`) names the function, and the operator it
    runs on libtorch (`lowers_to`) is checked the same way, against the
    lowered line's parameters."""
    for ov in SCHEMA:
        if "python" in ov:
            if ov["name"] not in FUNCTIONAL:
                fn = getattr(torch.nn.functional, ov["python"].rpartition(".")[2])
                py = list(inspect.signature(fn).parameters)
                assert all(p["name"] in py for p in ov["params"]), (ov["overload"], py)
            if "lowers_to" not in ov:
                continue  # a Python function picking among operators (F.interpolate)
            name, _, overload = ov["lowers_to"].partition(".")
            sig = ov["lowered_signature"]
            params = sig[sig.index("(") + 1:sig[:sig.rindex("->")].rindex(")")]
            ours = [a.split("=")[0].split()[-1] for a in params.split(", ") if a != "*"]
        else:
            name, _, overload = ov["overload"].partition(".")
            ours = [p.get("aten", p["name"]) for p in ov["params"]]
        theirs = [a.name for a in getattr(getattr(torch.ops.aten, name), overload or "default")._schema.arguments]
        assert theirs[:len(ours)] == ours, (ov["overload"], theirs)


def test_generic_entry_errors(backend):
    x = et.tensor([[1.0, -2.0]])
    gc.collect()  # earlier tests' garbage must not be freed between the two counts
    before = et.live()["tensors"]
    cases = [
        (lambda: et.op("no_such_op", x), "E_INVALID_ARG", "unknown op"),
        (lambda: et.op("exp", x, foo=1), "E_INVALID_ARG", "unknown argument \"foo\""),
        (lambda: et.op("softplus", x, beta="a"), "E_INVALID_ARG", "\"beta\" must be"),
        (lambda: et.op("exp", x, x), "E_INVALID_ARG", "got 2 input(s)"),
        (lambda: et.op("exp"), "E_INVALID_ARG", "got 0 input(s)"),
        (lambda: et.op("silu", et.tensor([1, 2])), "E_DTYPE", "int64"),
        (lambda: et.op("exp", None), "E_INVALID_ARG", "0 handle"),
    ]
    for fn, code, text in cases:
        with pytest.raises(et.EnkaiError) as e:
            fn()
        assert e.value.code == code and text in str(e.value), str(e.value)
    assert et.live()["tensors"] == before


def test_kwargs_json_errors(backend):
    x = et.tensor([1.0])
    out = (et.ctypes.c_int64 * 4)() if hasattr(et, "ctypes") else None
    import ctypes
    out = (ctypes.c_int64 * 4)()
    arr = (ctypes.c_int64 * 1)(x.handle)
    for bad in [b"{", b"[1]", b"\"x\"", b"{\"beta\": }", b"\xff"]:
        assert et.lib.enkai_op(b"softplus", arr, 1, bad, out, 4) == -1
        assert et.lib.enkai_tensor_last_error_code() == 1, bad
    assert et.lib.enkai_op(b"softplus", arr, 1, b"{}", out, 0) == -1  # no room for the result
    assert et.lib.enkai_op(None, arr, 1, None, out, 4) == -1
    assert et.lib.enkai_tensor_last_error_code() == 2
    n = et.lib.enkai_op(b"softplus", arr, 1, b" {\"beta\": 2, \"threshold\": 10} ", out, 4)
    assert n == 1
    et.lib.enkai_tensor_free(out[0])


def test_methods_and_functions_come_from_the_schema(backend):
    x = et.tensor([[0.5, -1.0], [2.0, 3.0]])
    np.testing.assert_allclose(x.exp().numpy(), np.exp(x.numpy()), rtol=1e-6)
    np.testing.assert_allclose(et.leaky_relu(x, 0.2).numpy(), torch.nn.functional.leaky_relu(torch.tensor(x.numpy()), 0.2).numpy())
    assert et.gelu is not None and et.isnan(x).dtype == "bool"


# ---------------------------------------------------------------- other ops

def build_input(rng, spec, dtype, domain, layout):
    """(ours, torch's) for one case input spec; lists give TensorLists; null an item left out."""
    if spec is None:
        return None, None
    if isinstance(spec, list) and spec and not any(isinstance(s, int) for s in spec):
        pairs = [build_input(rng, s, dtype, domain, layout) for s in spec]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    if isinstance(spec, dict):
        lo, hi = spec.get("range", [0, 2])
        d = spec.get("dtype", dtype)
        shape = spec["shape"]
        if d == "bool":
            a = rng.random(shape) < 0.5
        elif d in ("int64", "int32", "uint8"):
            # (a float range, given for the float dtypes, as the integers around it)
            lo, hi = int(np.floor(lo)), int(np.ceil(hi))
            a = rng.integers(lo, max(hi, lo + 1), shape).astype({"int64": np.int64, "int32": np.int32, "uint8": np.uint8}[d])
        else:
            a = rng.uniform(lo, hi, shape).astype(np.float64 if d == "fp64" else np.float32)
        return pair(a, d, "contiguous")
    shape = list(spec)
    lay = layout if len(shape) == 2 else "contiguous"
    return pair(values(rng, base_shape(shape, lay), dtype, domain), dtype, lay)


def fits(ov, case):
    """Whether a case is for this overload, as enkai_op resolves it: a row's
    cases cover all its overloads; the inputs must fill its tensor
    parameters, the kwargs must name its other parameters and give every
    one without a default, and lists and strings go exactly where they are
    taken (an int also fills `int[1]`; conv2d's `padding` is a list or "same")."""
    tensors = [p for p in ov["params"] if p["type"] in ("Tensor", "Tensor[]")]
    other = {p["name"]: p for p in ov["params"] if p["type"] not in ("Tensor", "Tensor[]")}
    kw = case.get("kwargs", {})
    for k, v in kw.items():
        if k not in other:
            return False
        t = other[k]["type"]
        if (isinstance(v, list) and not t.startswith("int[")) or (isinstance(v, int) and not isinstance(v, bool) and t == "int[]") \
                or (isinstance(v, str) and t != "str") or (isinstance(v, (int, float)) and not isinstance(v, bool) and t == "str"):
            return False
    needed = {n for n, p in other.items() if "default" not in p}
    return len(case["inputs"]) == len(tensors) and needed <= set(kw)


def call_aten(ov, inputs, kw):
    """PyTorch's overload with the case's tensors bound by parameter name (a
    Scalar or int parameter may come between them, as `dim` in gather)."""
    names = [p["name"] for p in ov["params"] if p["type"] in ("Tensor", "Tensor[]")]
    return aten(ov)(**dict(zip(names, inputs)), **kw)


def results(x):
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


# Rows of domain "own" (random results) are tested by test_op_random.py.
@pytest.mark.parametrize("name", [n for n in OPS if not all(o["pointwise"] or o["domain"] == "own" for o in overloads(n))])
def test_op_cases(name, backend):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    checked = 0
    for ov in overloads(name):
        if backend not in ov["backends"] or ov["domain"] == "own":
            continue
        for case in ov["cases"]:
            if not fits(ov, case):
                continue
            kw = case.get("kwargs", {})
            for dtype in DTYPES:
                for layout in ("contiguous", "transposed"):
                    built = [build_input(rng, s, dtype, ov["domain"], layout) for s in case["inputs"]]
                    ours_in, torch_in = [b[0] for b in built], [b[1] for b in built]
                    what = f"{ov['overload']} {dtype} {layout} {case}"
                    ref, err = refusal(lambda: call_aten(ov, torch_in, kw))
                    if err is not None:
                        with pytest.raises(et.EnkaiError) as e:
                            et.op(name, *ours_in, **kw)
                        assert e.value.code in ("E_DTYPE", "E_TORCH", "E_SHAPE", "E_INVALID_ARG", "E_LINALG"), f"{what}: {e.value}"
                        continue
                    try:
                        got = results(et.op(name, *ours_in, **kw))
                    except et.EnkaiError as e:
                        if backend == "cpu" and e.code == "E_UNSUPPORTED" and (name, dtype) in NATIVE_GAPS:
                            continue
                        raise
                    refs = results(ref)
                    assert len(got) == len(refs), what
                    if name in RECURRENT and dtype in ("fp16", "bf16"):
                        check_no_worse_than_torch(got, refs, ov, torch_in, kw, dtype, what)
                        checked += 1
                        continue
                    for g, r in zip(got, refs):
                        if isinstance(r, bool):
                            r = torch.tensor(r)
                        check_close(g, r, what, LOOSE.get(name, 1))
                    if name.endswith("_"):
                        check_close(ours_in[0], torch_in[0], f"self of {what}")
                    checked += 1
            if ov["differentiable"]:
                check_case_grad(rng, ov, case, kw)
    assert checked > 0, f"{name}: no case ran"


def check_no_worse_than_torch(got, refs, ov, torch_in, kw, dtype, what):
    """A recurrence in half precision rounds every op of every step: two
    evaluations in different orders drift apart by more than the storage
    type's rounding, and ill-conditioned steps amplify it (a bf16 gru output
    was 0.51 here, 0.085 in PyTorch, 0.36 exactly). The oracle is then the
    fp64 result on the same half inputs: ours must be within RECURRENT_HALF
    of it, or no further than twice PyTorch's own half result. Measured over
    16 hash seeds (cpu backend, largest error against fp64): gru bf16 ours
    0.108 / PyTorch 0.053, fp16 0.020 / 0.018; lstm bf16 0.046 / 0.028,
    fp16 0.006 / 0.005; the cells below those."""
    up = [x.double() if isinstance(x, torch.Tensor) else [t.double() if t is not None else None for t in x] if isinstance(x, list) else x
          for x in torch_in]
    exact = results(call_aten(ov, up, kw))
    for g, r, e in zip(got, refs, exact):
        ours, theirs, e = to_numpy(g).astype(np.float64), to_numpy(r).astype(np.float64), e.detach().numpy()
        ours_err, torch_err = np.abs(ours - e).max(initial=0), np.abs(theirs - e).max(initial=0)
        assert ours_err <= max(2 * torch_err, RECURRENT_HALF[dtype]), f"{what}: ours {ours_err} from fp64, torch {torch_err}"


def check_case_grad(rng, ov, case, kw):
    for dtype in ("fp32", "fp64"):
        built = [build_input(rng, s, dtype, ov["domain"], "contiguous") for s in case["inputs"]]
        ours_in, torch_in = [b[0] for b in built], [b[1] for b in built]
        flat_t = [t for x in torch_in for t in (x if isinstance(x, list) else [x]) if t is not None]
        flat_o = [t for x in ours_in for t in (x if isinstance(x, list) else [x]) if t is not None]
        diff = [i for i, t in enumerate(flat_t) if t.dtype == DTYPES[dtype]]
        for i in diff:
            flat_t[i].requires_grad_()
            flat_o[i].require_grad()
        torch_in, ours_in = nonleaf(ov["name"], torch_in), nonleaf(ov["name"], ours_in)
        refs, err = refusal(lambda: call_aten(ov, torch_in, kw))
        if err is not None:
            return  # a refused case (checked by the caller)
        refs = [r for r in results(refs) if isinstance(r, torch.Tensor) and r.dtype.is_floating_point]
        if not refs or not diff:
            return
        ws = [values(rng, list(r.shape), dtype, "any") for r in refs]
        loss = sum((r * torch.from_numpy(w)).sum() for r, w in zip(refs, ws))
        grads, err = refusal(lambda: torch.autograd.grad(loss, [flat_t[i] for i in diff], allow_unused=True))
        got = [g for g in results(et.op(ov["name"], *ours_in, **kw)) if g.dtype in ("fp32", "fp64")]
        total = None
        for g, w in zip(got, ws):
            term = (g * et.from_numpy(w)).sum()
            total = term if total is None else total + term
        if err is not None and any(words in str(err) for words in TORCH_BACKWARD_BUGS.get(ov["name"], ())):
            return  # PyTorch's backward fails where the derivative exists (checked in the op's own suite)
        if err is not None:
            # PyTorch has no derivative here (scatter with reduce): ours refuses too.
            with pytest.raises(et.EnkaiError):
                total.backward()
            return
        total.backward()
        for i, g_ref in zip(diff, grads):
            if g_ref is not None:
                check_close(flat_o[i].grad, g_ref, f"grad {i} of {ov['overload']} {dtype} {case}", LOOSE.get(ov["name"], 1), scaled=True)


def test_nonfinite_kwargs_pass_as_python_writes_them(backend):
    """json.dumps writes inf and nan as Infinity and NaN: they reach the op."""
    a = np.random.default_rng(3).normal(size=(3, 4)).astype(np.float32)
    x, t = et.from_numpy(a), torch.from_numpy(a)
    for ord_ in (float("inf"), float("-inf")):
        np.testing.assert_allclose(et.op("linalg_vector_norm", x, ord=ord_).numpy(), torch.linalg.vector_norm(t, ord=ord_).numpy())
    mask = et.from_numpy(a > 0)
    got = et.op("masked_fill", x, mask, value=float("-inf")).numpy()
    np.testing.assert_array_equal(got, t.masked_fill(torch.from_numpy(a > 0), float("-inf")).numpy())
    np.testing.assert_array_equal(et.op("clamp", x, min=float("nan")).numpy(), torch.clamp(t, min=float("nan")).numpy())
    # Inside a string the words stay text.
    with pytest.raises(et.EnkaiError, match="approximate"):
        et.op("gelu", x, approximate="Infinity NaN")
    assert et.op("sum", x, dtype="float64").dtype == "fp64"


def test_generic_entry_equals_the_typed_functions(backend):
    """Each op that also has a typed C function gives the same tensor both ways (bit for bit)."""
    rng = np.random.default_rng(5)
    a, b = (et.from_numpy(rng.normal(size=(3, 4)).astype(np.float32)) for _ in range(2))
    bt = b.transpose(0, 1)  # held: a temporary's handle would be freed before the call
    w, bias = et.from_numpy(rng.normal(size=(4, 5)).astype(np.float32)), et.from_numpy(rng.normal(size=(5,)).astype(np.float32))
    w_out_in = w.transpose(0, 1)
    ids = et.from_numpy(np.array([0, 3, 1]))
    lib = et.lib
    dev = lib.enkai_tensor_device(b"cpu")
    pairs = [
        (lambda: et.op("add", a, b), lambda: et._wrap(lib.enkai_tensor_add(a.handle, b.handle))),
        (lambda: et.op("sub", a, b), lambda: et._wrap(lib.enkai_tensor_sub(a.handle, b.handle))),
        (lambda: et.op("mul", a, b), lambda: et._wrap(lib.enkai_tensor_mul(a.handle, b.handle))),
        (lambda: et.op("div", a, b), lambda: et._wrap(lib.enkai_tensor_div(a.handle, b.handle))),
        (lambda: et.op("relu", a), lambda: et._wrap(lib.enkai_tensor_relu(a.handle))),
        (lambda: et.op("sigmoid", a), lambda: et._wrap(lib.enkai_tensor_sigmoid(a.handle))),
        (lambda: et.op("tanh", a), lambda: et._wrap(lib.enkai_tensor_tanh(a.handle))),
        (lambda: et.op("gelu", a), lambda: et._wrap(lib.enkai_tensor_gelu(a.handle))),
        (lambda: et.op("softmax", a, dim=1), lambda: et._wrap(lib.enkai_tensor_softmax(a.handle, 1))),
        (lambda: et.op("sum", a, dim=[1]), lambda: et._wrap(lib.enkai_tensor_sum(a.handle, 1, 0))),
        (lambda: et.op("mean", a, dim=[0], keepdim=True), lambda: et._wrap(lib.enkai_tensor_mean(a.handle, 0, 1))),
        # The seed's `dim < 0`: every dim.
        (lambda: et.op("sum", a), lambda: et._wrap(lib.enkai_tensor_sum(a.handle, -1, 0))),
        (lambda: et.op("mean", a, dim=None, keepdim=True), lambda: et._wrap(lib.enkai_tensor_mean(a.handle, -1, 1))),
        (lambda: et.op("matmul", a, bt), lambda: et._wrap(lib.enkai_tensor_matmul(a.handle, bt.handle))),
        (lambda: et.op("transpose", a, dim0=-1, dim1=0), lambda: et._wrap(lib.enkai_tensor_transpose(a.handle, -1, 0))),
        (lambda: et.op("reshape", a, shape=[2, -1]), lambda: et._wrap(lib.enkai_tensor_reshape(a.handle, b"[2,-1]"))),
        (lambda: et.op("view", a, size=[12]), lambda: et._wrap(lib.enkai_tensor_view(a.handle, b"[12]"))),
        (lambda: et.op("detach", a), lambda: et._wrap(lib.enkai_tensor_detach(a.handle))),
        # The seed's typed linear takes the weight [in, out]; F.linear nn.Linear's [out, in].
        (lambda: et.op("linear", a, w_out_in, bias), lambda: et._wrap(lib.enkai_tensor_linear(a.handle, w.handle, bias.handle))),
        # The seed's typed losses and layers: F's semantics, the seed's argument order.
        (lambda: et.op("cross_entropy", a, ids), lambda: et._wrap(lib.enkai_tensor_cross_entropy(a.handle, ids.handle))),
        (lambda: et.op("embedding", ids, w), lambda: et._wrap(lib.enkai_tensor_embedding(w.handle, ids.handle))),
        (lambda: (et.manual_seed(3), et.op("dropout", a, p=0.25))[1], lambda: (et.manual_seed(3), et._wrap(lib.enkai_tensor_dropout(a.handle, 0.25, 1)))[1]),
        (lambda: et.op("zeros", size=[2, 3], dtype="int32"), lambda: et._wrap(lib.enkai_tensor_zeros(b"[2,3]", b"int32", dev))),
        (lambda: et.op("ones", size=[4]), lambda: et._wrap(lib.enkai_tensor_ones(b"[4]", b"fp32", dev))),
        (lambda: et.op("full", size=[2], fill_value=2.5, dtype="fp64"), lambda: et._wrap(lib.enkai_tensor_full(b"[2]", 2.5, b"fp64", dev))),
    ]
    for generic, typed in pairs:
        g, t = generic(), typed()
        assert g.dtype == t.dtype and g.shape == t.shape
        np.testing.assert_array_equal(g.numpy(), t.numpy())
    # The typed view keeps the seed's copy where the strides allow no view; PyTorch's refuses.
    np.testing.assert_array_equal(et._wrap(lib.enkai_tensor_view(bt.handle, b"[12]")).numpy(), bt.numpy().reshape(12))
    with pytest.raises(et.EnkaiError) as e:
        et.op("view", bt, size=[12])
    assert e.value.code in ("E_SHAPE", "E_TORCH")
    # ... and the Python methods built from the schema are the same entry.
    np.testing.assert_array_equal(a.exp().numpy(), et.op("exp", a).numpy())
    np.testing.assert_array_equal(et.clamp(a, min=0.0).numpy(), et.op("clamp", a, min=0.0).numpy())
    lib.enkai_tensor_device_free(dev)


def test_repeated_calls_keep_every_check(backend):
    """A call made before is served from the thread's memo of resolved
    calls: keyed on the exact name and kwargs bytes and the input pattern,
    and it still reports every error the first call would."""
    import ctypes

    lib = et.lib
    rng = np.random.default_rng(11)
    a, b = (et.from_numpy(rng.normal(size=(2, 3)).astype(np.float32)) for _ in range(2))
    ta, tb = torch.from_numpy(a.numpy()), torch.from_numpy(b.numpy())
    out = (ctypes.c_int64 * 4)()
    ins = (ctypes.c_int64 * 2)(a.handle, b.handle)

    def call(name, hs, kwargs, cap=4, dest=out):
        arr = (ctypes.c_int64 * max(len(hs), 1))(*hs)
        n = lib.enkai_op(name, arr, len(hs), kwargs, dest, cap)
        if n < 0:
            return None, lib.enkai_tensor_last_error_code(), lib.enkai_tensor_last_error().decode()
        return [et._wrap(out[i]) for i in range(n)], 0, ""

    for _ in range(3):
        got, _, _ = call(b"add", [a.handle, b.handle], None)
        np.testing.assert_array_equal(got[0].numpy(), (ta + tb).numpy())
    del got
    # The same name with other kwargs (NULL, "{}", spaced, alpha) are other calls.
    for kw, want in [(b"{}", ta + tb), (b" {} ", ta + tb), (b'{"alpha": 2}', ta + 2 * tb), (b'{"alpha": 2.5}', ta + 2.5 * tb), (None, ta + tb)]:
        for _ in range(2):
            got, code, msg = call(b"add", [a.handle, b.handle], kw)
            assert code == 0, msg
            np.testing.assert_allclose(got[0].numpy(), want.numpy(), rtol=1e-6)
            del got
    # Errors after the call was memoised: the same codes and messages as a first call.
    before = et.live()["tensors"]
    assert lib.enkai_op(b"add", ins, 2, None, None, 1) == -1
    assert lib.enkai_tensor_last_error().decode() == "E_NULL_POINTER: out is NULL"
    assert lib.enkai_op(b"add", None, 2, None, out, 1) == -1
    assert lib.enkai_tensor_last_error().decode().startswith("E_NULL_POINTER: inputs is NULL")
    assert lib.enkai_op(b"add", ins, 2, None, out, 0) == -1
    assert lib.enkai_tensor_last_error().decode() == "E_INVALID_ARG: add: 1 results do not fit in cap 0"
    assert lib.enkai_op(b"add\xff", ins, 2, None, out, 1) == -1
    assert lib.enkai_tensor_last_error_code() == 1
    assert lib.enkai_op(b"add", ins, 2, b"{\xff}", out, 1) == -1
    assert lib.enkai_tensor_last_error_code() == 1
    wide = et.from_numpy(np.ones((4,), np.float32))
    _, code, msg = call(b"add", [a.handle, wide.handle], None)
    assert msg == "E_SHAPE: add: shapes [2,3] and [4] do not broadcast", msg
    c = et.from_numpy(np.ones((2, 3), np.float32))
    stale = c.handle
    c.free()
    _, code, msg = call(b"add", [a.handle, stale], None)
    assert msg.startswith("E_HANDLE_STALE"), msg
    _, code, msg = call(b"add", [a.handle, 0], None)
    assert msg.startswith("E_INVALID_ARG") and "0 handle" in msg, msg
    del wide
    assert et.live()["tensors"] == before
    # One op, one kwargs text, several input patterns (optional tensors left out).
    lo, hi = et.from_numpy(np.full((2, 3), -0.5, np.float32)), et.from_numpy(np.full((2, 3), 0.5, np.float32))
    tlo, thi = torch.full((2, 3), -0.5), torch.full((2, 3), 0.5)
    for _ in range(2):
        for hs, want in [([a.handle, lo.handle, 0], torch.clamp(ta, min=tlo)), ([a.handle, 0, hi.handle], torch.clamp(ta, max=thi)),
                         ([a.handle, lo.handle, hi.handle], torch.clamp(ta, tlo, thi))]:
            got, code, msg = call(b"clamp", hs, None)
            assert code == 0, msg
            np.testing.assert_array_equal(got[0].numpy(), want.numpy())
    # More distinct calls than the memo has slots, twice over: evictions and shared slots.
    for _ in range(2):
        for k in range(150):
            got, code, msg = call(b"add", [a.handle, b.handle], json.dumps({"alpha": k}).encode())
            assert code == 0, msg
            np.testing.assert_allclose(got[0].numpy(), (ta + k * tb).numpy(), rtol=1e-5, atol=1e-5)


def test_a_left_out_tensor_past_the_64th_input_is_never_served_another_pattern(backend):
    """The resolution records which inputs are present; a call with a 0
    handle past the 64th input must be resolved for its own pattern (the
    cache's key holds 64 of them), so it is refused, not run on a NULL tensor."""
    import ctypes

    xs = [et.from_numpy(np.full((1,), float(i), np.float32)) for i in range(70)]
    hs = [x.handle for x in xs]
    out = (ctypes.c_int64 * 1)()
    arr = (ctypes.c_int64 * 70)(*hs)
    for _ in range(2):
        assert et.lib.enkai_op(b"cat", arr, 70, None, out, 1) == 1
        np.testing.assert_array_equal(et._wrap(out[0]).numpy(), np.arange(70, dtype=np.float32))
    arr[66] = 0
    before = et.live()["tensors"]
    assert et.lib.enkai_op(b"cat", arr, 70, None, out, 1) == -1
    assert "0 handle in the tensor list" in et.lib.enkai_tensor_last_error().decode()
    assert et.live()["tensors"] == before


def test_the_memo_is_per_thread(backend):
    """Threads calling the same ops with their own kwargs each get their own results."""
    from helpers import run_in_threads

    a = et.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    b = et.from_numpy(np.ones((2, 3), np.float32))
    errors = []

    def work(k):
        try:
            for i in range(200):
                alpha = (k + i) % 5
                got = et.op("add", a, b, alpha=alpha).numpy()
                np.testing.assert_array_equal(got, a.numpy() + alpha)
                np.testing.assert_array_equal(et.op("add", a, b).numpy(), a.numpy() + 1)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    run_in_threads(work, 4)
    assert not errors, errors
