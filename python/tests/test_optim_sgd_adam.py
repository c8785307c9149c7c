"""SGD and Adam against torch.optim.SGD / torch.optim.Adam (single-tensor path,
foreach=False, as PyTorch runs on CPU), and the LR schedules against
torch.optim.lr_scheduler / transformers, on both backends.

Both sides start from the same weights and step with the same grads, given
exactly: ours come from backward of sum(p * G), whose grad is G bit for bit
on either backend; torch's are set as `.grad = G`. So only the update
kernels are compared.

Tolerances. On the torch backend the steps run libtorch's own ops in
PyTorch's order (the shim), so the results are identical: no tolerance.

On the native backend each op is computed as ATen's CPU kernel computes it
(`add` with alpha and `lerp` as one fused multiply-add, `addcmul` as
fmadd(value * t1, t2, self), `addcdiv` unfused, measured against torch) and
rounded to the dtype once. SGD uses only those ops, and is checked to the
"elementwise" class of helpers.NATIVE_TOL (4 ulps; measured: identical).
Adam also takes a square root, and libtorch's vectorised `sqrt` is not the
correctly rounded one (measured on this CPU: 20% of fp32 and 1.4% of fp64
results are one ulp off IEEE `sqrt`, which the native kernel uses), so a
step's update can differ by an ulp, and a param by one ulp of its size when
that flips its rounding; carried over the run that is at most STEPS ulps of
the largest param: atol = STEPS * eps * max|p| (fp32 eps 2^-23, fp64
2^-52), rtol 4 ulps (measured: fp32 1.5e-8 with max|p| ~3, fp64 1.4e-17).

bf16 runs too: exact on the torch backend (the shim passes each Python
number as PyTorch's Python does, a wrapped number, so bf16 ops compute with
it in float). The native kernels compute in float and round once per op, as
ATen's vector loop does; ATen's scalar loop for a tensor's last elements
rounds bf16 after every arithmetic operation instead, so those elements can
differ by an ulp and carry it on: atol 4 bf16 ulps (2^-7) of the largest
param (measured: about 1).
"""

import ctypes
import gc
import itertools
import json
import math

import pytest
import torch
from safetensors.torch import load_file

import enkai_tensor as et
from enkai_tensor import lib
from helpers import same, to_et, to_torch

pytestmark = pytest.mark.usefixtures("backend")

SHAPES = [(4, 3), (5,), (37, 11)]  # (37, 11): ATen's vector loop and its tail
STEPS = 10
DTYPES = [torch.float32, torch.float64]
ALL_DTYPES = DTYPES + [torch.bfloat16]


def sgd_flags():
    """Every valid combination of momentum, dampening, nesterov, weight decay."""
    for momentum, dampening, nesterov, wd in itertools.product([0.0, 0.9], [0.0, 0.1], [False, True], [0.0, 0.01]):
        if nesterov and (momentum <= 0 or dampening != 0):
            continue
        yield dict(momentum=momentum, dampening=dampening, nesterov=nesterov, weight_decay=wd)


def adam_flags():
    for amsgrad, wd in itertools.product([False, True], [0.0, 0.01]):
        yield dict(amsgrad=amsgrad, weight_decay=wd)


def flag_id(d):
    return "-".join(f"{k}={v}" for k, v in d.items())


def grads_for(step, dtype, shapes=SHAPES):
    """The grads of step `step`: their size varies from step to step, so that
    exp_avg_sq falls at times and amsgrad's max matters."""
    g = torch.Generator().manual_seed(100 + step)
    scale = [1.0, 3.0, 0.2][step % 3]
    return [(torch.randn(s, generator=g, dtype=torch.float64) * scale).to(dtype) for s in shapes]


def start(dtype, shapes=SHAPES, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in shapes]


def give_grads(es, gs):
    """Sets each param's grad to exactly `gs[i]` (None: that param gets none)."""
    et.zero_grad_multi([e for e, g in zip(es, gs) if g is not None])
    loss = None
    for e, g in zip(es, gs):
        if g is not None:
            term = (e * to_et(g)).sum()
            loss = term if loss is None else loss + term
    loss.backward()


def pair(kind, dtype, flags, lr=0.05, shapes=SHAPES):
    p0 = start(dtype, shapes)
    tps = [p.clone().requires_grad_() for p in p0]
    eps_ = [to_et(p).require_grad() for p in p0]
    if kind == "sgd":
        topt = torch.optim.SGD(tps, lr=lr, foreach=False, **flags)
        eopt = et.SGD(eps_, lr=lr, **flags)
    else:
        topt = torch.optim.Adam(tps, lr=lr, betas=(0.8, 0.95), eps=1e-7, foreach=False, **flags)
        eopt = et.Adam(eps_, lr=lr, betas=(0.8, 0.95), eps=1e-7, **flags)
    return tps, eps_, topt, eopt


def torch_step(topt, tps, gs):
    for t, g in zip(tps, gs):
        t.grad = None if g is None else g.clone()
    topt.step()


def check(eps_, tps, kind="sgd"):
    for e, t in zip(eps_, tps):
        if t.dtype == torch.bfloat16 and et.backend_current() == "cpu":
            same(e, t, atol=4 * 2.0 ** -7 * float(t.detach().abs().max()))
        elif kind == "adam" and et.backend_current() == "cpu":
            eps = torch.finfo(t.dtype).eps
            same(e, t, rtol=4 * eps, atol=STEPS * eps * float(t.detach().abs().max()))
        else:
            same(e, t)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=["fp32", "fp64", "bf16"])
@pytest.mark.parametrize("flags", list(sgd_flags()), ids=flag_id)
def test_sgd_matches_torch(dtype, flags):
    tps, eps_, topt, eopt = pair("sgd", dtype, flags)
    for step in range(STEPS):
        gs = grads_for(step, dtype)
        torch_step(topt, tps, gs)
        give_grads(eps_, gs)
        eopt.step()
        check(eps_, tps)
    per_param = 1 if flags["momentum"] else 0  # a momentum buffer each, in the param's dtype
    assert eopt.state_bytes == per_param * sum(t.numel() for t in tps) * tps[0].element_size()


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=["fp32", "fp64", "bf16"])
@pytest.mark.parametrize("flags", list(adam_flags()), ids=flag_id)
def test_adam_matches_torch(dtype, flags):
    tps, eps_, topt, eopt = pair("adam", dtype, flags)
    for step in range(STEPS):
        gs = grads_for(step, dtype)
        torch_step(topt, tps, gs)
        give_grads(eps_, gs)
        eopt.step()
        check(eps_, tps, "adam")
    per_param = 3 if flags["amsgrad"] else 2
    assert eopt.state_bytes == per_param * sum(t.numel() for t in tps) * tps[0].element_size()


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_groups_set_lr_and_params_without_grad(kind):
    """A second group with its own lr and weight decay (the rest inherited), an
    lr changed mid-run, and a param that never gets a grad (skipped: neither
    moved nor given state), as torch's param groups do."""
    dtype = torch.float32
    flags = dict(momentum=0.9, nesterov=True, weight_decay=0.01) if kind == "sgd" else dict(amsgrad=True, weight_decay=0.01)
    tps, eps_, topt, eopt = pair(kind, dtype, flags, shapes=SHAPES[:2])
    q0 = start(dtype, [(6,), (2, 2)], seed=7)
    tqs = [q.clone().requires_grad_() for q in q0]
    eqs = [to_et(q).require_grad() for q in q0]
    topt.add_param_group({"params": tqs, "lr": 0.2, "weight_decay": 0.1})
    eopt.add_param_group(eqs, 0.2, 0.1)
    for step in range(STEPS):
        if step == 4:
            topt.param_groups[1]["lr"] = 0.03
            eopt.set_lr(1, 0.03)
        if step == 7:
            topt.param_groups[0]["lr"] = 0.01
            eopt.set_lr(0, 0.01)
        gs = grads_for(step, dtype, SHAPES[:2] + [(6,), (2, 2)])
        gs[3] = None  # eqs[1] never has a grad
        torch_step(topt, tps + tqs, gs)
        give_grads(eps_ + eqs, gs)
        eopt.step()
        check(eps_ + eqs, tps + tqs, kind)
    same(eqs[1], q0[1])
    assert len(topt.state[tqs[1]]) == 0
    per_param = 1 if kind == "sgd" else 3
    stepped = tps + tqs[:1]
    assert eopt.state_bytes == per_param * sum(t.numel() for t in stepped) * 4
    with pytest.raises(et.EnkaiError) as ex:
        eopt.set_lr(2, 0.1)
    assert ex.value.code == "E_INVALID_ARG"


def optimizer_file(d):
    return load_file(str(d / "latest" / "optimizer.safetensors"))


@pytest.mark.parametrize("kind,flags", [
    ("sgd", dict(momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("sgd", dict(momentum=0.9, nesterov=True)),
    ("sgd", dict()),
    ("adam", dict(amsgrad=True, weight_decay=0.01)),
    ("adam", dict()),
], ids=["sgd-dampening", "sgd-nesterov", "sgd-plain", "adam-amsgrad", "adam"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp64"])
def test_checkpoint_round_trip_mid_run_continues_like_torch(tmp_path, kind, flags, dtype):
    tps, eps_, topt, eopt = pair(kind, dtype, flags)
    eopt.add_param_group([], 0.02, 0.0)  # an empty group survives too
    topt.add_param_group({"params": [], "lr": 0.02, "weight_decay": 0.0})
    for step in range(STEPS):
        if step == 5:
            et.checkpoint_save(tmp_path, eps_, eopt, '{"step": 5}')
            # the saved state is torch's, by PyTorch's state names
            saved = optimizer_file(tmp_path)
            for i, t in enumerate(tps):
                for name, want in topt.state[t].items():
                    if name == "step" or want is None:
                        continue
                    got = saved[f"{name}.{i}"]
                    assert got.dtype == want.dtype
                    if et.backend_current() == "torch":
                        assert torch.equal(got, want), (name, i)
            names = {k.split(".")[0] for k in saved}
            want_names = {n for t in tps for n, v in topt.state[t].items() if n != "step" and v is not None}
            assert names == want_names
            state_bytes = eopt.state_bytes
            eopt.free()
            eps_, eopt, meta = et.checkpoint_load(tmp_path)
            assert meta == b'{"step": 5}' and eopt.state_bytes == state_bytes
        gs = grads_for(step, dtype)
        torch_step(topt, tps, gs)
        give_grads(eps_, gs)
        eopt.step()
        check(eps_, tps, kind)
    eopt.set_lr(1, 0.5)  # the empty group came back as group 1


def test_adamw_checkpoints_keep_their_format(tmp_path):
    """An AdamW optimizer file is written as before the other kinds existed (no
    "kind", format enkai-adamw-1), so older readers still load it."""
    p = et.ones([3]).require_grad()
    opt = et.AdamW([p])
    (p * p).sum().backward()
    opt.step()
    et.checkpoint_save(tmp_path, [p], opt)
    from safetensors import safe_open

    with safe_open(str(tmp_path / "latest" / "optimizer.safetensors"), "pt") as f:
        meta = f.metadata()
    assert meta["format"] == "enkai-adamw-1" and "kind" not in meta
    assert set(json.loads(meta["groups"])[0]) == {"lr", "beta1", "beta2", "eps", "weight_decay", "params"}


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_grad_scaler_skips_the_step_and_keeps_the_state(kind):
    """enkai_amp_step with an inf: nothing moves, the state is untouched, and the
    run goes on like a torch run that never took that step."""
    dtype = torch.float32
    flags = dict(momentum=0.9, weight_decay=0.01) if kind == "sgd" else dict(amsgrad=True)
    tps, eps_, topt, eopt = pair(kind, dtype, flags)
    scaler = et.GradScaler(init_scale=2.0 ** 10)
    for step in range(STEPS):
        gs = grads_for(step, dtype)
        et.zero_grad_multi(eps_)
        loss = sum(((e * to_et(g)).sum() for e, g in zip(eps_[1:], gs[1:])), (eps_[0] * to_et(gs[0])).sum())
        if step == 4:
            before = [to_torch(e) for e in eps_]
            state_bytes = eopt.state_bytes
            assert not scaler.step(loss * float("inf"), eps_, eopt)
            for e, b in zip(eps_, before):
                assert torch.equal(to_torch(e), b)
            assert eopt.state_bytes == state_bytes and scaler.get_scale() == 2.0 ** 9
            continue
        # a power-of-two scale: scaled and unscaled grads are exactly G again
        assert scaler.step(loss, eps_, eopt)
        torch_step(topt, tps, gs)
        check(eps_, tps, kind)


def test_refusals_use_pytorchs_words():
    t = torch.zeros(3, requires_grad=True)
    e = et.zeros([3]).require_grad()
    cases = [
        (dict(lr=-1.0), dict(lr=-1.0)),
        (dict(lr=0.1, momentum=-0.5), dict(lr=0.1, momentum=-0.5)),
        (dict(lr=0.1, weight_decay=-0.1), dict(lr=0.1, weight_decay=-0.1)),
        (dict(lr=0.1, nesterov=True), dict(lr=0.1, nesterov=True)),
        (dict(lr=0.1, momentum=0.9, dampening=0.1, nesterov=True), dict(lr=0.1, momentum=0.9, dampening=0.1, nesterov=True)),
    ]
    for tk, ek in cases:
        with pytest.raises(ValueError) as want:
            torch.optim.SGD([t], **tk)
        with pytest.raises(et.EnkaiError) as got:
            et.SGD([e], **ek)
        assert got.value.code == "E_INVALID_ARG" and str(want.value) in str(got.value), (str(want.value), str(got.value))
    for kw in [dict(lr=-1.0), dict(eps=-1e-8), dict(betas=(1.0, 0.9)), dict(betas=(0.9, 1.0)), dict(betas=(-0.1, 0.9)),
               dict(weight_decay=-0.1), dict(lr=-2.5e-05)]:
        with pytest.raises(ValueError) as want:
            torch.optim.Adam([t], **kw)
        with pytest.raises(et.EnkaiError) as got:
            et.Adam([e], **kw)
        assert got.value.code == "E_INVALID_ARG" and str(want.value) in str(got.value), (str(want.value), str(got.value))
    # the C booleans are 0 or 1
    lst = json.dumps([e.handle]).encode()
    assert lib.enkai_opt_sgd_create(lst, 0.1, 0.9, 0.0, 0.0, 2) == 0
    assert lib.enkai_tensor_last_error().startswith(b"E_INVALID_ARG: nesterov must be 0 or 1")
    assert lib.enkai_opt_adam_create(lst, 0.1, 0.9, 0.999, 1e-8, 0.0, -1) == 0
    assert lib.enkai_tensor_last_error().startswith(b"E_INVALID_ARG: amsgrad must be 0 or 1")
    for create in (lambda: lib.enkai_opt_sgd_create(None, 0.1, 0.9, 0.0, 0.0, 0),
                   lambda: lib.enkai_opt_adam_create(None, 0.1, 0.9, 0.999, 1e-8, 0.0, 0)):
        assert create() == 0
        assert lib.enkai_tensor_last_error().startswith(b"E_NULL_POINTER")
    # a group added or an lr set later is checked the same way
    opt = et.SGD([e], lr=0.1, momentum=0.9, nesterov=True)
    with pytest.raises(et.EnkaiError) as got:
        opt.set_lr(0, -1.0)
    assert got.value.code == "E_INVALID_ARG" and "Invalid learning rate: -1.0" in str(got.value)
    with pytest.raises(et.EnkaiError) as got:
        opt.add_param_group([et.zeros([2]).require_grad()], float("nan"), 0.0)
    assert got.value.code == "E_INVALID_ARG" and "Invalid learning rate: nan" in str(got.value)
    with pytest.raises(et.EnkaiError) as got:
        opt.add_param_group([e], 0.1, 0.0)  # already in group 0
    assert got.value.code == "E_INVALID_ARG"


def test_wrong_kind_and_stale_handles():
    e = et.zeros([3]).require_grad()
    sgd, adam = et.SGD([e], lr=0.1, momentum=0.9), et.Adam([et.zeros([3]).require_grad()])
    # an SGD or Adam optimizer is no AdamW state for the functional step
    for opt in (sgd, adam):
        with pytest.raises(et.EnkaiError) as ex:
            et.adamw_step_multi([e], [et.ones([3])], opt)
        assert ex.value.code == "E_INVALID_ARG" and "not an AdamW state" in str(ex.value)
    # a tensor handle is not an optimizer, an optimizer is not a param
    assert lib.enkai_opt_step(e.handle) == 1
    assert lib.enkai_tensor_last_error().startswith(b"E_HANDLE_KIND")
    with pytest.raises(et.EnkaiError) as ex:
        et.SGD([sgd.handle], lr=0.1)
    assert ex.value.code == "E_HANDLE_KIND"
    h = sgd.handle
    sgd.free()
    for fn in (lib.enkai_opt_step, lib.enkai_opt_adamw_step):
        assert fn(h) == 1
        assert lib.enkai_tensor_last_error().startswith(b"E_HANDLE_STALE")
    assert lib.enkai_opt_set_lr(h, 0, 0.1) == 1
    assert lib.enkai_tensor_last_error().startswith(b"E_HANDLE_STALE")
    adam.free()


def test_optimizers_keep_params_alive_and_counters_return():
    gc.collect()
    base = et.live()
    p = et.randn([3]).require_grad()
    opts = [et.SGD([p], lr=0.1, momentum=0.9), et.Adam([p], amsgrad=True)]
    (p * p).sum().backward()
    for o in opts:
        o.step()
    del p
    gc.collect()
    assert et.live()["tensors"] == base["tensors"] + 1 and et.live()["opts"] == base["opts"] + 2
    for o in opts:
        o.free()
    assert et.live() == base


# ------------------------------------------------------------- LR schedules

BASE_LR = 0.1
N = 30


def torch_lrs(make, n=N, base_lr=BASE_LR):
    """The lr torch's optimizer holds after 0..n scheduler steps."""
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=base_lr)
    sched = make(opt)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(n):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    return lrs


def ours(spec, n=N, base_lr=BASE_LR):
    return [et.lr_schedule(spec, k, base_lr) for k in range(n + 1)]


def test_step_schedule_is_steplr():
    want = torch_lrs(lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=4, gamma=0.3))
    got = ours({"kind": "step", "step_size": 4, "gamma": 0.3})
    # StepLR.step() multiplies the lr by gamma at each boundary (a rounding each,
    # <= 8 here); ours is its closed form base * gamma ** (k // step_size)
    # (`_get_closed_form_lr`): within that many ulps of a double.
    for k, (a, b) in enumerate(zip(got, want)):
        assert a == pytest.approx(b, rel=16 * 2.0 ** -52, abs=0), k


def test_linear_warmup_is_linearlr():
    want = torch_lrs(lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=7))
    got = ours({"kind": "linear_warmup", "warmup_steps": 7, "start_factor": 0.1})
    # LinearLR.step() compounds a ratio per step (<= 7 roundings); ours is its closed form.
    for k, (a, b) in enumerate(zip(got, want)):
        assert a == pytest.approx(b, rel=16 * 2.0 ** -52, abs=0), k


@pytest.mark.parametrize("warmup,total,min_lr", [(5, 20, 1e-3), (0, 25, 0.0), (3, 3, 0.01)])
def test_cosine_is_transformers_cosine_with_min_lr_and_warmup(warmup, total, min_lr):
    """The oracle: transformers' get_cosine_with_min_lr_schedule_with_warmup (a
    torch LambdaLR), driven past total_steps (where, like it, ours is not clamped)."""
    tr = pytest.importorskip("transformers.optimization")
    want = torch_lrs(lambda o: tr.get_cosine_with_min_lr_schedule_with_warmup(o, warmup, total, min_lr=min_lr))
    got = ours({"kind": "cosine", "warmup_steps": warmup, "total_steps": total, "min_lr": min_lr})
    # the same closed form in the same order of double operations, with the same libm cos
    assert got == want


def test_schedule_applied_through_set_lr_trains_like_torch():
    """An SGD run whose lr follows the cosine schedule through enkai_opt_set_lr
    equals torch's SGD driven by the transformers scheduler."""
    tr = pytest.importorskip("transformers.optimization")
    spec = {"kind": "cosine", "warmup_steps": 3, "total_steps": STEPS, "min_lr": 0.001}
    tps, eps_, topt, eopt = pair("sgd", torch.float64, dict(momentum=0.9), lr=BASE_LR)
    sched = tr.get_cosine_with_min_lr_schedule_with_warmup(topt, 3, STEPS, min_lr=0.001)
    for step in range(STEPS):
        eopt.set_lr(0, et.lr_schedule(spec, step, BASE_LR))
        gs = grads_for(step, torch.float64)
        torch_step(topt, tps, gs)
        sched.step()
        give_grads(eps_, gs)
        eopt.step()
        check(eps_, tps)


@pytest.mark.parametrize("spec", [
    "{", "[]", '{"kind": "exp"}', '{"kind": "step", "gamma": 0.5}', '{"kind": "step", "step_size": 2, "gamma": 0.5, "x": 1}',
    '{"kind": "step", "step_size": 0, "gamma": 0.5}', '{"kind": "step", "step_size": 1.5, "gamma": 0.5}',
    '{"kind": "linear_warmup", "warmup_steps": 4, "start_factor": 0}',
    '{"kind": "linear_warmup", "warmup_steps": 0, "start_factor": 0.5}',
    '{"kind": "cosine", "warmup_steps": 5, "total_steps": 4, "min_lr": 0}',
    '{"kind": "cosine", "warmup_steps": 1, "total_steps": 4, "min_lr": -1}',
])
def test_bad_schedules_are_refused(spec):
    out = ctypes.c_double(-7.0)
    assert lib.enkai_lr_schedule(spec.encode(), 3, 0.1, ctypes.byref(out)) == 1
    assert lib.enkai_tensor_last_error().startswith(b"E_INVALID_ARG")
    assert out.value == -7.0  # written only on success


def test_schedule_arguments_are_checked():
    spec = b'{"kind": "step", "step_size": 2, "gamma": 0.5}'
    out = ctypes.c_double(-7.0)
    for args, code in [((None, 1, 0.1, ctypes.byref(out)), b"E_NULL_POINTER"), ((spec, 1, 0.1, None), b"E_NULL_POINTER"),
                       ((spec, -1, 0.1, ctypes.byref(out)), b"E_INVALID_ARG"),
                       ((spec, 1, -0.1, ctypes.byref(out)), b"E_INVALID_ARG"),
                       ((spec, 1, math.nan, ctypes.byref(out)), b"E_INVALID_ARG")]:
        assert lib.enkai_lr_schedule(*args) == 1
        assert lib.enkai_tensor_last_error().startswith(code)
    assert out.value == -7.0
    assert lib.enkai_lr_schedule(spec, 5, 0.1, ctypes.byref(out)) == 0 and out.value == 0.1 * 0.5 ** 2
