"""Gradient checkpointing (`enkai_grad_checkpoint`, `et.utils.checkpoint`)
against `torch.utils.checkpoint.checkpoint(use_reentrant=False)` and against
the same computation without checkpointing, on both backends.

fp64 spans: the recomputation runs the same kernels on the same values, so
the gradients with and without checkpointing are held to 1e-12 relative
(PyTorch's own equality, up to summation order in accumulating a weight
used by two spans); those against PyTorch to the same bound on the torch
backend (same kernels) and to 1e-10 on native. Memory is compared as the
resident-set growth of the forward pass, never as time."""

import gc

import numpy as np
import pytest
import torch
import torch.utils.checkpoint as tcp

import enkai_tensor as et
from enkai_tensor.utils import checkpoint as ckpt
from helpers import to_et, to_torch

pytestmark = pytest.mark.usefixtures("backend")


def close(e, t, rtol=1e-12):
    np.testing.assert_allclose(to_torch(e).numpy(), t.detach().numpy(), rtol=rtol, atol=rtol)


def tol():
    return 1e-12 if et.backend_current() == "torch" else 1e-10


def block(x, w1, w2):
    """A span with two outputs: a hidden state and an auxiliary one."""
    h = (x @ w1).tanh()
    return (h @ w2).sin(), h.exp().sum()


def tblock(x, w1, w2):
    h = torch.tanh(x @ w1)
    return torch.sin(h @ w2), h.exp().sum()


def params(seed, requires_x=True):
    g = torch.Generator().manual_seed(seed)
    ts = [torch.randn(*s, generator=g, dtype=torch.float64) for s in ([6, 5], [5, 7], [7, 5])]
    es = [to_et(t) for t in ts]
    for i, (t, e) in enumerate(zip(ts, es)):
        if i or requires_x:
            t.requires_grad_()
            e.require_grad()
    return ts, es


def test_gradients_equal_those_without_checkpointing_and_pytorchs():
    ts, es = params(1)
    x, w1, w2 = es
    # Two spans in a row, the weights reached by closure as well as passed.
    y1, a1 = ckpt.checkpoint(lambda x: block(x, w1, w2), x)
    y2, a2 = ckpt.checkpoint(block, y1, w1, w2)
    loss = (y2 * y2).sum() + a1 + a2 * 0.5
    assert y1.requires_grad and y2.requires_grad
    loss.backward()
    got = [e.grad for e in es]

    ts2, es2 = params(1)
    y1, a1 = block(*es2)
    y2, a2 = block(y1, es2[1], es2[2])
    ((y2 * y2).sum() + a1 + a2 * 0.5).backward()
    for g, e in zip(got, es2):
        close(g, to_torch(e.grad))

    tx, tw1, tw2 = ts
    y1, a1 = tcp.checkpoint(lambda x: tblock(x, tw1, tw2), tx, use_reentrant=False)
    y2, a2 = tcp.checkpoint(tblock, y1, tw1, tw2, use_reentrant=False)
    ((y2 * y2).sum() + a1 + a2 * 0.5).backward()
    for g, t in zip(got, ts):
        close(g, t.grad, tol())
    assert not ckpt._live


def test_weights_reached_by_closure_get_gradients_when_no_input_requires_grad():
    ts, es = params(2, requires_x=False)
    x, w1, w2 = es
    y, a = ckpt.checkpoint(lambda x: block(x, w1, w2), x)
    assert y.requires_grad
    (y.sum() + a).backward()
    tx, tw1, tw2 = ts
    y, a = tcp.checkpoint(lambda x: tblock(x, tw1, tw2), tx, use_reentrant=False)
    (y.sum() + a).backward()
    assert x.grad is None
    close(w1.grad, tw1.grad, tol())
    close(w2.grad, tw2.grad, tol())


def test_dropout_inside_sees_the_same_mask_and_the_generator_moves_on_as_without():
    def span(x, w):
        return et.op("dropout", (x @ w).relu(), p=0.5)

    def run(use_ckpt):
        _, (x, w, _) = params(3)
        et.manual_seed(7)
        y = ckpt.checkpoint(span, x, w) if use_ckpt else span(x, w)
        (y * y).sum().backward()
        after = et.randn([4], "fp64")  # the generator after the backward pass
        return to_torch(x.grad), to_torch(w.grad), to_torch(after)

    plain, checkpointed = run(False), run(True)
    for a, b in zip(plain, checkpointed):
        assert torch.equal(a, b)


def test_an_unused_output_and_an_integer_output():
    ts, (x, w1, w2) = params(4)

    def span(x):
        y = (x @ w1).tanh()
        return y, et.op("argmax", y, dim=1), y.exp()

    y, idx, unused = ckpt.checkpoint(span, x)
    assert idx.dtype == "int64" and not idx.requires_grad and unused.requires_grad
    (y * y).sum().backward()
    tx, tw1, _ = ts
    (torch.tanh(tx @ tw1) ** 2).sum().backward()
    close(x.grad, tx.grad, tol())
    close(w1.grad, tw1.grad, tol())
    assert w2.grad is None


def test_outside_grad_mode_the_function_just_runs():
    _, (x, w1, w2) = params(5)
    with et.no_grad():
        y, a = ckpt.checkpoint(block, x, w1, w2)
    assert not y.requires_grad and not a.requires_grad
    ref, _ = block(x.detach(), w1.detach(), w2.detach())
    assert torch.equal(to_torch(y), to_torch(ref))
    assert not ckpt._live


def test_autocast_is_reapplied_when_recomputing():
    # fp32 inputs, so that autocast's bf16 matmuls change the values.
    def fp32_run(use_ckpt):
        g = torch.Generator().manual_seed(6)
        x, w1, w2 = [to_et(torch.randn(*s, generator=g)).require_grad() for s in ([6, 5], [5, 7], [7, 5])]
        with et.autocast():
            y, a = ckpt.checkpoint(block, x, w1, w2) if use_ckpt else block(x, w1, w2)
        (y.to_dtype("fp32").sum() + a.to_dtype("fp32")).backward()  # outside autocast, as a GradScaler loop does
        return [to_torch(t.grad) for t in (x, w1, w2)]

    for a, b in zip(fp32_run(False), fp32_run(True)):
        assert torch.equal(a, b)


PEAK_CHILD = r"""
import re, sys
import enkai_tensor as et
from enkai_tensor.utils import checkpoint as ckpt

def hwm():
    return int(re.search(r"VmHWM:\s+(\d+) kB", open("/proc/self/status").read()).group(1)) * 1024

et.backend_set(sys.argv[1])
et.set_num_threads(1)
x = et.randn([1024, 1024], "fp32").require_grad()

def span(x):
    for _ in range(4):
        x = x.tanh()
    return x

base = hwm()
for _ in range(8):
    x = ckpt.checkpoint(span, x) if sys.argv[2] == "1" else span(x)
print(hwm() - base)
"""


def test_the_spans_activations_are_not_kept():
    """Eight spans of four 4 MiB activations each, as a model's layers: the
    forward pass's peak memory is the spans' outputs and one span's
    activations with checkpointing (about 48 MiB), all 32 activations
    without (128 MiB). Each side in a fresh process, on one thread, by its
    peak resident set (VmHWM). glibc's mmap threshold is fixed at 1 MiB in
    the child, so that a freed 4 MiB block goes back to the system: with
    its default dynamic threshold, glibc's reuse of freed blocks on the
    heap decides libtorch's peak (98 to 120 MiB against 134 measured, by
    the load on the machine), not what the library keeps. Measured with
    it fixed: native 44 vs 128 MiB, libtorch 50 vs 134."""
    import os
    import subprocess
    import sys

    def grown(use_ckpt):
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(et.__file__)))
        env = dict(os.environ, PYTHONPATH=package_root + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   MALLOC_MMAP_THRESHOLD_=str(1 << 20))
        out = subprocess.run([sys.executable, "-c", PEAK_CHILD, et.backend_current(), str(use_ckpt)],
                             capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 0, out.stderr
        return int(out.stdout.split()[-1])

    plain, checkpointed = grown(0), grown(1)
    assert plain > 120 << 20, plain
    assert checkpointed < 64 << 20, (plain, checkpointed)


def test_errors_are_reported_and_the_span_is_always_released():
    _, (x, w1, w2) = params(8)

    class Boom(Exception):
        pass

    def fails(x):
        raise Boom("in the span")

    with pytest.raises(Boom):
        ckpt.checkpoint(fails, x)
    assert not ckpt._live

    calls = []

    def flaky(x):
        calls.append(1)
        if len(calls) > 1:
            raise Boom("recomputing")
        return (x @ w1).tanh()

    y = ckpt.checkpoint(flaky, x)
    with pytest.raises(et.EnkaiError) as e:
        y.sum().backward()
    assert e.value.code == "E_AUTOGRAD" and "recomputing the span failed" in str(e.value)
    assert isinstance(e.value.__cause__, Boom)
    del y
    gc.collect()
    assert not ckpt._live

    # A different number of outputs when recomputed.
    n = []

    def varying(x):
        n.append(1)
        y = (x @ w1).tanh()
        return (y,) if len(n) == 1 else (y, y)

    y = ckpt.checkpoint(varying, x)
    with pytest.raises(et.EnkaiError) as e:
        y.sum().backward()
    assert e.value.code == "E_AUTOGRAD" and "2 outputs when recomputed, 1 in the forward pass" in str(e.value)

    # The graph is used once, as PyTorch's without retain_graph.
    y = ckpt.checkpoint(lambda x: (x @ w1).tanh(), x)
    loss = y.sum()
    loss.backward()
    with pytest.raises(et.EnkaiError) as e:
        loss.backward()
    assert e.value.code == "E_AUTOGRAD"
    del y, loss
    gc.collect()
    assert not ckpt._live


def test_the_c_entry_refuses_bad_arguments():
    import ctypes

    from enkai_tensor._lib import CHECKPOINT_FN, RELEASE_FN

    released = []

    @RELEASE_FN
    def release(ctx):
        released.append(ctx)

    @CHECKPOINT_FN
    def forged(ctx, inputs, n, out, cap):
        out[0] = 0x7FFF_FFFF_FFFF
        return 1

    @CHECKPOINT_FN
    def too_many(ctx, inputs, n, out, cap):
        return cap + 1

    @CHECKPOINT_FN
    def silent(ctx, inputs, n, out, cap):
        return -1

    x = et.randn([3], "fp32").require_grad()
    ins = (ctypes.c_int64 * 1)(x.handle)
    outs = (ctypes.c_int64 * 2)()
    lib = et.lib
    cases = [
        (CHECKPOINT_FN(), ins, 1, outs, 2, "E_NULL_POINTER"),
        (silent, None, 1, outs, 2, "E_NULL_POINTER"),
        (silent, ins, 1, None, 2, "E_NULL_POINTER"),
        (silent, (ctypes.c_int64 * 1)(12345), 1, outs, 2, "E_HANDLE"),
        (forged, ins, 1, outs, 2, "E_INVALID_ARG"),
        (too_many, ins, 1, outs, 2, "E_INVALID_ARG"),
        (silent, ins, 1, outs, 2, "E_INVALID_ARG"),
    ]
    for i, (fn, a, n, o, cap, code) in enumerate(cases):
        assert lib.enkai_grad_checkpoint(fn, release, i + 1, a, n, o, cap) == -1
        assert et.lib.enkai_tensor_last_error().decode().startswith(code), (i, et.lib.enkai_tensor_last_error())
    assert released == list(range(1, len(cases) + 1))
