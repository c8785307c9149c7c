"""GradScaler against torch.amp.GradScaler("cpu"), autocast against
torch.autocast("cpu"), on both backends. The scale sequence is compared
exactly on both (the native backend applies _amp_update_scale_'s rule in
the same float32/double arithmetic); values follow helpers.same's classes."""

import math

import pytest
import torch
import torch.nn.functional as F

import enkai_tensor as et
from helpers import same, to_et

pytestmark = pytest.mark.usefixtures("backend")


def test_scaler_sequence_with_injected_infs_matches_torch():
    torch.manual_seed(4)
    ts = torch.amp.GradScaler("cpu", init_scale=8.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)
    es = et.GradScaler(8.0, 2.0, 0.5, 2)
    p = torch.zeros(5, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.0)
    for inject in [False, False, True, False, False, False, True, True, False, False, False]:
        ts.scale(torch.zeros((), requires_grad=True))  # initialises the scale on cpu, as es.scale does
        g = torch.randn(5) * ts.get_scale()
        if inject:
            g[1] = math.inf
        p.grad = g.clone()
        eg = to_et(g)
        ts.unscale_(opt)
        found_t = sum(v.item() for v in ts._per_optimizer_states[id(opt)]["found_inf_per_device"].values())
        found_e = es.unscale_([eg])
        assert found_e == bool(found_t)
        same(eg, p.grad)
        ts.step(opt)
        ts.update()
        es.update(found_e)
        assert es.get_scale() == ts.get_scale()


def test_growth_stops_when_the_scale_would_overflow():
    ts = torch.amp.GradScaler("cpu", init_scale=3e38, growth_factor=2.0, growth_interval=1)
    es = et.GradScaler(3e38, 2.0, 0.5, 1)
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.0)
    ts.scale(torch.zeros(()))
    p.grad = torch.ones(1)
    ts.unscale_(opt)
    ts.update()
    es.unscale_([et.ones([1])])
    es.update()
    assert es.get_scale() == ts.get_scale() == pytest.approx(3e38, rel=1e-6)


def test_scaler_validation_and_state_errors():
    for args, code in [((0.0, 2.0, 0.5, 1), "E_AMP_INVALID_SCALE"), ((math.inf, 2.0, 0.5, 1), "E_AMP_INVALID_SCALE"),
                       ((1.0, 1.0, 0.5, 1), "E_AMP_INVALID_GROWTH_FACTOR"),
                       ((1.0, 2.0, 1.0, 1), "E_AMP_INVALID_BACKOFF_FACTOR"),
                       ((1.0, 2.0, 0.0, 1), "E_AMP_INVALID_BACKOFF_FACTOR"),
                       ((1.0, 2.0, 0.5, 0), "E_AMP_INVALID_GROWTH_INTERVAL")]:
        with pytest.raises(et.EnkaiError) as ex:
            et.GradScaler(*args)
        assert ex.value.code == code
    s = et.GradScaler()
    assert s.get_scale() == 65536.0
    g = et.ones([2])
    assert s.unscale_([g]) is False
    with pytest.raises(et.EnkaiError) as ex:
        s.unscale_([g])
    assert ex.value.code == "E_AMP_STATE"
    s.update()
    s.unscale_([g])  # allowed again after update


def test_scale_loss_matches_torch():
    ts = torch.amp.GradScaler("cpu", init_scale=1024.0)
    es = et.GradScaler(1024.0)
    loss = torch.tensor(0.37)
    same(es.scale(to_et(loss)), ts.scale(loss))
    half = torch.tensor(0.37, dtype=torch.bfloat16)
    same(es.scale(to_et(half)), ts.scale(half))


def test_whole_scaled_training_step_matches_torch():
    torch.manual_seed(5)
    w0 = torch.randn(4, 3)
    tw = w0.clone().requires_grad_()
    ew = to_et(w0).require_grad()
    topt = torch.optim.AdamW([tw], lr=0.01, foreach=False)
    eopt = et.AdamW([ew], lr=0.01)
    ts = torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=2)
    es = et.GradScaler(256.0, 2.0, 0.5, 2)
    for step in range(6):
        x = torch.randn(3)
        if step == 2:
            x[0] = math.inf  # the grads become non-finite: both skip the step
        topt.zero_grad()
        et.zero_grad_multi([ew])
        tl = ((tw @ x) ** 2).mean()
        y = ew @ to_et(x)
        el = (y * y).mean()
        ts.scale(tl).backward()
        ts.step(topt)
        ts.update()
        stepped = es.step(el, [ew], eopt)
        assert stepped == (step != 2)
        same(ew, tw, kind="reduce")
        assert es.get_scale() == ts.get_scale()


def test_autocast_dtypes_and_values_match_torch():
    torch.manual_seed(6)
    a, b, w, bias = torch.randn(4, 8), torch.randn(8, 5), torch.randn(8, 5), torch.randn(5)
    ea, eb, ew, ebias = map(to_et, (a, b, w, bias))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expect = [a @ b, F.linear(a, w.t(), bias), torch.relu(a), a + a, torch.softmax(a, -1)]
    with et.autocast():
        got = [ea @ eb, et.linear(ea, ew, ebias), ea.relu(), ea + ea, ea.softmax(-1)]
    kinds = ["reduce", "reduce", "elementwise", "elementwise", "reduce"]
    for e, t, kind in zip(got, expect, kinds):
        same(e, t, kind=kind)
    assert (ea @ eb).dtype == "fp32"  # closed again


def test_autocast_output_dtypes_follow_torch_op_by_op():
    """Every op of the ABI, on fp32 and bf16 inputs, inside autocast: the
    output dtype is torch.autocast("cpu")'s (matmul/linear in bf16,
    cross_entropy in fp32, the rest in their inputs' dtypes)."""
    torch.manual_seed(7)
    x, w, b = torch.randn(4, 8), torch.randn(8, 8), torch.randn(8)
    t = torch.randint(0, 8, (4,))
    m = torch.zeros(4, 8, dtype=torch.bool)
    ops = {
        "matmul": (lambda a: a @ w, lambda a: a @ to_et(w)),
        "linear": (lambda a: F.linear(a, w.t(), b), lambda a: et.linear(a, to_et(w), to_et(b))),
        "softmax": (lambda a: a.softmax(-1), lambda a: a.softmax(-1)),
        "masked_softmax": (lambda a: torch._masked_softmax(a, m, 1, None), lambda a: et.masked_softmax(a, to_et(m), 1)),
        "layernorm": (lambda a: F.layer_norm(a, (8,), torch.ones(8), torch.zeros(8)),
                      lambda a: et.layernorm(a, et.ones([8]), et.zeros([8]))),
        "cross_entropy": (lambda a: F.cross_entropy(a, t), lambda a: et.cross_entropy(a, to_et(t))),
        "gelu": (F.gelu, lambda a: a.gelu()),
        "relu": (torch.relu, lambda a: a.relu()),
        "sigmoid": (torch.sigmoid, lambda a: a.sigmoid()),
        "tanh": (torch.tanh, lambda a: a.tanh()),
        "add": (lambda a: a + x, lambda a: a + to_et(x)),
        "mul": (lambda a: a * x, lambda a: a * to_et(x)),
        "sum": (lambda a: a.sum(), lambda a: a.sum()),
        "mean": (lambda a: a.mean(), lambda a: a.mean()),
        "transpose": (lambda a: a.t(), lambda a: a.transpose(0, 1)),
    }
    for dtype in (torch.float32, torch.bfloat16):
        a = x.to(dtype)
        for name, (tf, ef) in ops.items():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                want = tf(a)
            with et.autocast():
                got = ef(to_et(a))
            assert got.dtype == {torch.float32: "fp32", torch.bfloat16: "bf16"}[want.dtype], (name, dtype)


def test_autocast_nesting_and_device_selection():
    a, b = et.randn([2, 3]), et.randn([3, 2])
    with et.autocast():
        with et.autocast():
            assert (a @ b).dtype == "bf16"
        assert (a @ b).dtype == "bf16"
    assert (a @ b).dtype == "fp32"
    x, y = torch.randn(2, 3), torch.randn(3, 2)
    with torch.autocast("cpu", dtype=torch.float16):
        expect = x @ y
    with et.autocast(et.device(), "fp16"):
        same(to_et(x) @ to_et(y), expect, kind="reduce")
    with pytest.raises(et.EnkaiError) as ex:
        et.lib.enkai_autocast_exit() and et._raise()
    assert ex.value.code == "E_AMP_STATE"
    with pytest.raises(et.EnkaiError) as ex:
        with et.autocast(et.device(), "fp64"):
            pass
    assert ex.value.code == "E_DTYPE"


def test_autocast_is_per_thread():
    import threading
    seen = []
    with et.autocast():
        t = threading.Thread(target=lambda: seen.append((et.randn([2, 2]) @ et.randn([2, 2])).dtype))
        t.start()
        t.join()
    assert seen == ["fp32"]
