"""AdamW against torch.optim.AdamW (single-tensor path, as PyTorch uses on CPU),
on both backends.

Tolerances: on the torch backend the steps run libtorch's own ops, so exact.
On the native backend, where the grads come from a backward pass (native
sums in another order: the "reduce" class of helpers.NATIVE_TOL) AdamW is
scale-free, so a relative error in a grad moves an update by the same
relative amount of lr, well inside that class. Where both sides step with
the same given grads, only the kernels' rounding differs (ATen's vectorised
lerp is a fused multiply-add, the native one is not: one rounding per op
apart, so the "elementwise" class, a few ulps).
"""

import pytest
import torch

import enkai_tensor as et
from helpers import same, to_et

pytestmark = pytest.mark.usefixtures("backend")


def loss_pair(p, q, x, k):
    """The same scalar loss in both libraries: sum((p @ x)^2) + k * sum(q * q)."""
    if isinstance(p, torch.Tensor):
        y = p @ x
        return (y * y).sum() + (q * q).sum() * k
    y = p @ to_et(x)
    return (y * y).sum() + (q * q).sum() * et.full([], k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_adamw_groups_and_schedules_match_torch(dtype):
    torch.manual_seed(1)
    p0, q0 = torch.randn(4, 3, dtype=dtype), torch.randn(5, dtype=dtype)
    tp, tq = p0.clone().requires_grad_(), q0.clone().requires_grad_()
    ep, eq = to_et(p0).require_grad(), to_et(q0).require_grad()
    handles = (ep.handle, eq.handle)
    topt = torch.optim.AdamW([{"params": [tp]}, {"params": [tq], "lr": 0.05, "weight_decay": 0.1}],
                             lr=0.01, betas=(0.8, 0.99), eps=1e-7, weight_decay=0.02, foreach=False)
    eopt = et.AdamW([ep], lr=0.01, betas=(0.8, 0.99), eps=1e-7, weight_decay=0.02)
    eopt.add_param_group([eq], 0.05, 0.1)
    for step in range(6):
        x = torch.randn(3, dtype=dtype)
        if step == 3:  # a schedule changes group 1's lr
            topt.param_groups[1]["lr"] = 0.002
            eopt.set_lr(1, 0.002)
        topt.zero_grad()
        et.zero_grad_multi([ep, eq])
        loss_pair(tp, tq, x, 0.5).backward()
        loss_pair(ep, eq, x, 0.5).backward()
        topt.step()
        eopt.step()
        same(ep, tp, kind="reduce")
        same(eq, tq, kind="reduce")
    assert (ep.handle, eq.handle) == handles  # params stay the same handles


def test_param_group_step_steps_one_group():
    torch.manual_seed(2)
    p0, q0 = torch.randn(3), torch.randn(3)
    tp, tq = p0.clone().requires_grad_(), q0.clone().requires_grad_()
    ep, eq = to_et(p0).require_grad(), to_et(q0).require_grad()
    topt_p = torch.optim.AdamW([tp], lr=0.1, foreach=False)
    eopt = et.AdamW([ep], lr=0.1)
    eopt.add_param_group([eq], 0.3, 0.0)
    x = torch.randn(3)
    loss_pair(tp.reshape(1, 3), tq, x, 1.0).backward()
    loss_pair(ep.reshape([1, 3]), eq, x, 1.0).backward()
    topt_p.step()
    eopt.group_step(0)
    same(ep, tp, kind="reduce")
    same(eq, q0)  # group 1 untouched
    with pytest.raises(et.EnkaiError) as ex:
        eopt.group_step(2)
    assert ex.value.code == "E_INVALID_ARG"


def test_functional_multi_step_matches_torch_and_skips_zero_grads():
    torch.manual_seed(3)
    ps = [torch.randn(4), torch.randn(2, 2), torch.randn(3)]
    tps = [p.clone().requires_grad_() for p in ps]
    eps_ = [to_et(p) for p in ps]
    topt = torch.optim.AdamW(tps, lr=0.02, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=False)
    state = None
    for step in range(4):
        grads = [torch.randn_like(p) for p in ps]
        for t, g in zip(tps, grads):
            t.grad = g.clone()
        tps[2].grad = None  # skipped on both sides
        topt.step()
        eg = [to_et(grads[0]), to_et(grads[1]), None]
        new = et.adamw_step_multi(eps_, eg, state, lr=0.02, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
        assert state is None or new is state
        state = new
        for e, t in zip(eps_, tps):
            same(e, t)


def test_adamw_errors():
    """Refusals are the same on both backends."""
    p = et.randn([3]).require_grad()
    for kwargs, text in [({"lr": -1.0}, "learning rate"), ({"betas": (1.0, 0.9)}, "beta parameter at index 0"),
                         ({"eps": -1.0}, "epsilon"), ({"weight_decay": -0.1}, "weight_decay")]:
        with pytest.raises(et.EnkaiError) as ex:
            et.AdamW([p], **kwargs)
        assert ex.value.code == "E_INVALID_ARG" and text in str(ex.value)
    with pytest.raises(et.EnkaiError) as ex:
        et.AdamW([p, p])
    assert ex.value.code == "E_INVALID_ARG"
    with pytest.raises(et.EnkaiError) as ex:
        et.adamw_step_multi([p], [])
    assert ex.value.code == "E_INVALID_ARG"
    state = et.adamw_step_multi([p], [et.ones([3])])
    with pytest.raises(et.EnkaiError) as ex:
        et.adamw_step_multi([et.randn([3])], [et.ones([3])], state)
    assert ex.value.code == "E_INVALID_ARG"
    q = et.randn([3])
    for g, code in [(et.ones([2]), "E_SHAPE"), (et.ones([1]), "E_SHAPE"), (et.ones([3], "fp64"), "E_DTYPE")]:
        with pytest.raises(et.EnkaiError) as ex:
            et.adamw_step_multi([q], [g])
        assert ex.value.code == code
    with pytest.raises(et.EnkaiError) as ex:
        et.adamw_step_multi([et.ones([3], "int64")], [et.ones([3], "int64")])
    assert ex.value.code == "E_DTYPE"


def test_optimizer_keeps_params_alive_and_counters_return():
    import gc
    gc.collect()
    base = et.live()
    p = et.randn([3]).require_grad()
    opt = et.AdamW([p])
    del p
    gc.collect()
    assert et.live()["tensors"] == base["tensors"] + 1  # retained by the optimizer
    assert et.live()["opts"] == base["opts"] + 1
    opt.free()
    assert et.live() == base
