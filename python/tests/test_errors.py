"""Each malformed call raises with its code and leaves the live tensor count unchanged."""

import gc
import pytest
import torch

import enkai_tensor as et
from enkai_tensor._lib import lib
from helpers import to_et

A = lambda: et.randn([2, 3])


@pytest.fixture(autouse=True)
def _torch_unless_parametrized(request):
    """Tests without the `backend` fixture (checkpoints, AMP, LM, libtorch's own
    errors) run on torch whatever ENKAI_BACKEND says; the `backend` fixture,
    set up after this autouse one, overrides it for the tensor/op tests."""
    if "torch" not in et.backend_list():
        if "backend" not in request.fixturenames:
            pytest.skip("needs the torch backend")
        yield
        return
    before = et.backend_current()
    et.backend_set("torch")
    try:
        yield
    finally:
        et.backend_set(before)


CASES = [
    ("E_SHAPE", lambda: A() @ et.randn([4, 5]), "matmul [2,3] x [4,5]"),
    ("E_SHAPE", lambda: A() + et.randn([4]), "add: shapes [2,3] and [4] do not broadcast"),
    ("E_DTYPE", lambda: A() @ et.randn([3, 2], "fp64"), "fp32 and fp64"),
    ("E_SHAPE", lambda: A().reshape(4, 2), "cannot reshape [2,3] into [4,2]"),
    ("E_INVALID_ARG", lambda: A().reshape(-1, -1), "only one dimension may be -1"),
    ("E_SHAPE", lambda: A().transpose(0, 2), "dim 2 is out of range"),
    ("E_SHAPE", lambda: et.concat([A(), et.randn([3, 3])], 1), "differ outside dim 1"),
    ("E_INVALID_ARG", lambda: et.concat([], 0), "empty"),
    ("E_INVALID_ARG", lambda: A().slice(0, 0, 1, 0), "step must be positive"),
    ("E_SHAPE", lambda: A().sum(5), "dim 5 is out of range"),
    ("E_DTYPE", lambda: et.ones([3], "int64").mean(), "floating"),
    ("E_SHAPE", lambda: A().softmax(-3), "out of range"),
    ("E_SHAPE", lambda: et.masked_softmax(A(), et.ones([3, 2], "bool"), -1, 2), "mask [3,2] does not fit input [2,3]"),
    ("E_INVALID_ARG", lambda: et.masked_softmax(A(), et.ones([2, 3], "bool"), -1, 7), "mask_type"),
    ("E_INVALID_ARG", lambda: et.dropout(A(), 1.5), "p must be in [0, 1]"),
    ("E_SHAPE", lambda: et.layernorm(A(), et.ones([4])), "does not end with weight shape [4]"),
    ("E_SHAPE", lambda: et.embedding(et.randn([5, 2]), et.full([2], 7, "int64")), "table has 5 rows"),
    ("E_DTYPE", lambda: et.embedding(et.randn([5, 2]), et.ones([2])), "ids must be int64"),
    ("E_SHAPE", lambda: et.linear(A(), et.randn([2, 4])), "linear [2,3] x [2,4]"),
    ("E_SHAPE", lambda: et.linear(A(), et.randn([3, 4]), et.randn([5])), "bias [5]"),
    ("E_SHAPE", lambda: et.cross_entropy(A(), et.zeros([5], "int64")), "do not fit"),
    ("E_DTYPE", lambda: et.cross_entropy(A(), et.zeros([2], "int32")), "targets must be int64"),
    ("E_INVALID_ARG", lambda: A().to_dtype("float"), "unknown dtype"),
    ("E_HANDLE_KIND", lambda: et.Tensor._from_handle(lib.enkai_tensor_relu(et.device().handle)), "device handle"),
    ("E_HANDLE_INVALID", lambda: et.Tensor._from_handle(lib.enkai_tensor_relu(12345)), "12345 is not a tensor handle"),
    ("E_INVALID_ARG", lambda: et.Tensor._from_handle(lib.enkai_tensor_concat(b"[1,2.5]", 0)), "not an integer: 2.5"),
    ("E_NULL_POINTER", lambda: et.Tensor._from_handle(lib.enkai_tensor_reshape(A().handle, None)), "shape is NULL"),
]


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("code,call,text", CASES, ids=[c[2] for c in CASES])
def test_malformed_calls_raise_and_leak_nothing(code, call, text):
    import gc

    gc.collect()
    before = et.live()["tensors"]
    with pytest.raises(et.EnkaiError) as ex:
        call()
    got, message = ex.value.code, str(ex.value)
    del ex  # its traceback keeps the call's temporaries alive
    gc.collect()
    assert got == code, message
    assert text in message
    assert message.startswith(code + ": ")
    assert et.live()["tensors"] == before


@pytest.mark.usefixtures("backend")
def test_stale_handle_after_free():
    t = A()
    h = t.handle
    t.free()
    with pytest.raises(et.EnkaiError) as ex:
        et.Tensor._from_handle(lib.enkai_tensor_relu(h))
    assert ex.value.code == "E_HANDLE_STALE"


def test_backend_mismatch():
    et.backend_set("torch")
    a = A()
    et.backend_set("cpu")
    try:
        b = et.randn([3, 2])
    finally:
        et.backend_set("torch")
    with pytest.raises(et.EnkaiError) as ex:
        a @ b
    assert ex.value.code == "E_BACKEND_MISMATCH"


# --- hostile-call defects, each with its regression test ---------------------------------------

@pytest.mark.usefixtures("backend")
def test_a_failing_call_does_not_leave_autograd_off_on_its_thread():
    x = et.ones([3])
    with pytest.raises(et.EnkaiError):
        et.clip_grad_norm_multi([x], float("nan"), 2.0)  # refused; grad mode untouched either way
    x = et.ones([2]).require_grad()
    (x * x).sum().backward()  # grad mode was restored on the way out
    assert x.grad.tolist() == [2.0, 2.0]


def test_a_ranked_world_from_one_bad_integer_is_refused_at_once(tmp_path):
    for world in [1 << 40, (1 << 63) - 1]:
        with pytest.raises(et.EnkaiError) as ex:
            et.checkpoint_save_ranked(tmp_path, 0, world, [])
        assert ex.value.code == "E_INVALID_ARG" and "limit" in str(ex.value)
    assert not list(tmp_path.iterdir())


def test_an_empty_checkpoint_directory_is_refused_by_every_call():
    for call in [lambda: et.checkpoint_save("", []), lambda: et.checkpoint_load(""),
                 lambda: et.checkpoint_load_scaler(""), lambda: et.checkpoint_save_ranked("", 0, 1, []),
                 lambda: et.checkpoint_load_ranked("", 0), lambda: et.checkpoint_load_ranked_scaler("", 0)]:
        with pytest.raises(et.EnkaiError) as ex:
            call()
        assert ex.value.code == "E_INVALID_ARG" and "empty" in str(ex.value)


def test_abi_version_clears_the_last_error():
    assert lib.enkai_tensor_free(12345) == 1 and lib.enkai_tensor_last_error_code() != 0
    assert lib.enkai_abi_version() >> 32 == 1
    assert lib.enkai_tensor_last_error() is None and lib.enkai_tensor_last_error_code() == 0


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("shape", ["[2,\u00a03]", "\u3000[2]", "[2]\u00a0", "[\u20282]"])
def test_only_json_whitespace_is_whitespace(shape):
    gc.collect()  # tensors of earlier tests must not be freed during the count
    before = et.live()["tensors"]
    with pytest.raises(et.EnkaiError) as ex:
        et.Tensor._from_handle(lib.enkai_tensor_zeros(shape.encode(), b"fp32", et.device().handle))
    assert ex.value.code == "E_INVALID_ARG"
    assert et.live()["tensors"] == before
    et.zeros([2, 3])  # and JSON's own whitespace is fine:
    assert et.Tensor._from_handle(lib.enkai_tensor_zeros(b" [ 2 ,\t3\n]\r", b"fp32", et.device().handle)).shape == (2, 3)


@pytest.mark.usefixtures("backend")
def test_masked_softmax_of_an_empty_dimension_is_an_empty_result_not_a_kill():
    # libtorch's masked-softmax kernels die with SIGFPE here (torch._masked_softmax too);
    # the result is what plain softmax gives an empty input
    x, m = et.zeros([2, 0]), et.zeros([2, 0], "bool")
    for out in [et.masked_softmax(x, m, 1, 2), et.masked_softmax_backward(x, x, m, 1)]:
        assert out.shape == (2, 0) and out.dtype == "fp32"
    y = et.masked_softmax(et.zeros([1, 1, 3, 0]), et.zeros([1, 0], "bool"), 3, 1)
    assert y.shape == tuple(torch.softmax(torch.zeros(1, 1, 3, 0), 3).shape)
    with pytest.raises(et.EnkaiError) as ex:
        et.masked_softmax(x, m, 5, 2)  # the dim is still checked
    assert ex.value.code == "E_SHAPE"


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16", "fp64", "int64", "int32", "uint8", "bool"])
def test_full_refuses_exactly_the_values_pytorch_refuses(dtype):
    from helpers import TORCH, to_torch
    values = [0.0, -1.0, 255.0, 256.0, 65504.0, 65505.0, 1e5, 3.3e38, 3.4e38, 3.5e38, 1e308, -1e308,
              float("inf"), float("-inf"), float("nan"), 2.0 ** 31, -(2.0 ** 31) - 1, 2.0 ** 63, 2.5]
    for v in values:
        try:
            want = torch.full([2], v, dtype=TORCH[dtype])
        except RuntimeError:
            want = None
        if want is None:
            with pytest.raises(et.EnkaiError) as ex:
                et.full([2], v, dtype)
            assert ex.value.code == "E_INVALID_ARG" and "overflow" in str(ex.value), (dtype, v)
        else:
            got = to_torch(et.full([2], v, dtype))
            assert torch.equal(got, want) or (v != v and got.isnan().all()), (dtype, v, got, want)


def test_a_scale_float32_cannot_hold_is_refused_and_a_bad_saved_scale_creates_nothing(tmp_path):
    with pytest.raises(et.EnkaiError) as ex:
        et.GradScaler(init_scale=1e308)
    assert ex.value.code == "E_AMP_INVALID_SCALE"
    import json
    from test_checkpoint import rehash
    et.checkpoint_save(tmp_path, [et.ones([1])], None, "{}", scaler=et.GradScaler(init_scale=8.0))
    snap = tmp_path / "latest"
    for field, bad in [("scale", 1e308), ("scale", -1.0), ("growth_tracker", 1 << 40)]:
        v = json.loads((snap / "scaler.json").read_text())
        v[field] = bad
        (snap / "scaler.json").write_text(json.dumps(v))
        rehash(snap.resolve())
        before = et.live()["scalers"]
        with pytest.raises(et.EnkaiError) as ex:
            et.checkpoint_load_scaler(tmp_path)
        assert ex.value.code == "E_CKPT_FORMAT", (field, bad, ex.value)
        assert et.live()["scalers"] == before  # a failed load creates nothing
        v[field] = 8.0 if field == "scale" else 0
        (snap / "scaler.json").write_text(json.dumps(v))
    rehash(snap.resolve())
    assert et.checkpoint_load_scaler(tmp_path).get_scale() == 8.0


def test_an_lm_spec_from_one_bad_integer_is_refused_before_anything_is_built():
    huge = {"vocab_size": 8, "seq_len": 4, "d_model": 4, "n_layers": 1 << 40, "n_heads": 2}
    wide = dict(huge, n_layers=1, d_model=1 << 31, n_heads=1)
    before = et.live()["tensors"]
    for call, spec in [(lambda s: et.lm_init(s), huge), (lambda s: et.forward_lm([], s, [0], [0], 1, 1), huge),
                       (lambda s: et.lm_logits([], s, [0], 1, 1), huge), (lambda s: et.lm_init(s), wide)]:
        with pytest.raises(et.EnkaiError) as ex:
            call(spec)
        assert ex.value.code == "E_INVALID_ARG" and ("limit" in str(ex.value) or "int64" in str(ex.value)), ex.value
    with pytest.raises(et.EnkaiError) as ex:
        et.tinylm_init(8, 4, 4, 1 << 40, 2)
    assert ex.value.code == "E_INVALID_ARG" and "4096" in str(ex.value)
    # found by the fuzzer: a 2^32-element pos_embed was allocated and filled before failing
    with pytest.raises(et.EnkaiError) as ex:
        et.tinylm_init(16, (1 << 31) - 1, 2, 1, 1)
    assert ex.value.code == "E_INVALID_ARG" and "pos_embed" in str(ex.value) and "limit" in str(ex.value)
    assert et.live()["tensors"] == before


@pytest.mark.usefixtures("backend")
def test_gradient_utilities_refuse_integer_tensors_with_a_dtype_error_and_change_nothing():
    f, i = et.full([2], 3.0), et.ones([3], "int64")
    for call in [lambda: et.scale_grads_multi([f, i], 0.5), lambda: et.clip_grad_norm_multi([f, i], 1.0, 2.0)]:
        with pytest.raises(et.EnkaiError) as ex:
            call()
        assert ex.value.code == "E_DTYPE" and "int64" in str(ex.value)
        assert f.tolist() == [3.0, 3.0]  # the floating entry before it was not touched


def test_a_failing_scalar_taking_libtorch_op_is_an_error_not_a_printed_panic(capfd):
    """Found by the fuzzer: these were E_INTERNAL "panic caught", printed on stderr."""
    capfd.readouterr()
    with pytest.raises(et.EnkaiError) as ex:
        et.full([1 << 58], 1.0)  # 2^60 bytes: a valid size that cannot be allocated
    assert ex.value.code == "E_TORCH" and "allocate" in str(ex.value) and "frame #" not in str(ex.value)
    # a grad that itself requires grad is scaled in place under no_grad, as torch's grad utilities do
    x = et.randn([3]).require_grad()
    (x * x).sum().backward()
    g = x.grad
    g.require_grad()
    before = g.tolist()
    et.scale_grads_multi([g], 0.5)
    assert g.tolist() == pytest.approx([v * 0.5 for v in before])
    norm = torch.tensor(g.tolist()).norm().item()
    assert et.clip_grad_norm_multi([g], 1.0, 2.0) == pytest.approx(norm, rel=1e-6)
    assert "panic" not in capfd.readouterr().err


def test_tensor_rank_and_checkpoint_headers_are_bounded(tmp_path):
    import gc
    gc.collect()
    before = et.live()["tensors"]
    for text in [json_dims(65), json_dims(100000)]:
        with pytest.raises(et.EnkaiError) as ex:
            et.Tensor._from_handle(lib.enkai_tensor_zeros(text.encode(), b"fp32", et.device().handle))
        assert ex.value.code == "E_INVALID_ARG" and "limit of 64" in str(ex.value) and len(str(ex.value)) < 200
    x = et.zeros([1] * 64)  # the limit itself is fine
    with pytest.raises(et.EnkaiError) as ex:
        x.reshape([1] * 65)
    assert ex.value.code == "E_INVALID_ARG"
    # 700,000 references to one rank-64 tensor: a header over the format's
    # 100 MB limit, refused before it is built
    empty = et.zeros([0] * 64)
    with pytest.raises(et.EnkaiError) as ex:
        et.checkpoint_save(tmp_path, [empty] * 700000)
    assert ex.value.code == "E_INVALID_ARG" and "header" in str(ex.value)
    assert not list(tmp_path.glob("snap-*"))
    del x, empty, ex  # the exception info holds the call's arguments
    gc.collect()
    assert et.live()["tensors"] == before


def json_dims(n):
    return "[" + ",".join(["1"] * n) + "]"
