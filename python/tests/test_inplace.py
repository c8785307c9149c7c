"""In-place forms (`add_`, `copy_`, ...) beyond the generated suite (which
checks their values, refusals and gradients against torch.ops.aten over the
table's cases): aliasing (a view's base changes; every handle on self sees
the new value and history) and PyTorch's autograd rules for them (an
in-place op on a leaf that requires grad is refused; a backward through a
tensor that was overwritten after it was saved is E_AUTOGRAD, never a wrong
gradient). PyTorch is the oracle; values are compared exactly (the ops are
the same roundings on both sides)."""

import gc

import numpy as np
import pytest
import torch

import enkai_tensor as et

pytestmark = pytest.mark.usefixtures("backend")


def arr(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def test_writes_through_views_and_every_handle_sees_them():
    a = arr(3, 4)
    ours, ref = et.from_numpy(a.copy()), torch.from_numpy(a.copy())
    row, ref_row = et.op("select", ours, dim=0, index=1), ref.select(0, 1)
    out = row.add_(2.0)
    ref_row.add_(2.0)
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())  # the base changed
    np.testing.assert_array_equal(row.numpy(), ref_row.numpy())  # the old handle too
    np.testing.assert_array_equal(out.numpy(), ref_row.numpy())
    col, ref_col = et.op("permute", ours, dims=[1, 0]), ref.t()
    col.mul_(et.from_numpy(np.array([1.0, -1.0, 0.5], np.float32)))
    ref_col.mul_(torch.tensor([1.0, -1.0, 0.5]))
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    ours.zero_()
    assert not ours.numpy().any() and not row.numpy().any()


def test_history_is_rebased_on_every_handle():
    """x.mul_(w) then a loss of x (the old handle): the gradient includes the in-place op."""
    a, w = arr(3, 4), arr(4, seed=1)
    la, lw = et.from_numpy(a).require_grad(), et.from_numpy(w).require_grad()
    ta, tw = torch.from_numpy(a).requires_grad_(), torch.from_numpy(w).requires_grad_()
    x, tx = la * 1, ta * 1
    x.mul_(lw)
    tx.mul_(tw)
    x.add_(1.5, alpha=2)
    tx.add_(1.5, alpha=2)
    (x * x).sum().backward()
    (tx * tx).sum().backward()
    np.testing.assert_allclose(la.grad.numpy(), ta.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(lw.grad.numpy(), tw.grad.numpy(), rtol=1e-6)


def test_a_leaf_that_requires_grad_is_refused_unless_under_no_grad():
    a = arr(3)
    leaf = et.from_numpy(a).require_grad()
    with pytest.raises(et.EnkaiError) as e:
        leaf.add_(1.0)
    assert e.value.code == "E_AUTOGRAD" and "leaf" in str(e.value)
    np.testing.assert_array_equal(leaf.numpy(), a)  # untouched
    with et.no_grad():
        leaf.mul_(2.0)  # as an optimizer step does
    np.testing.assert_array_equal(leaf.numpy(), a * 2)
    (leaf * leaf).sum().backward()
    np.testing.assert_allclose(leaf.grad.numpy(), 4 * a, rtol=1e-6)


def test_overwriting_a_saved_tensor_fails_at_backward():
    a = arr(3, 4)
    for step in ("exp_result", "mul_operand", "no_grad_operand"):
        leaf = et.from_numpy(a).require_grad()
        tleaf = torch.from_numpy(a).requires_grad_()
        if step == "exp_result":  # exp saves its result
            y, ty = leaf.exp(), tleaf.exp()
            y.add_(1.0)
            ty.add_(1.0)
            loss, tloss = y.sum(), ty.sum()
        elif step == "mul_operand":  # mul saves both operands
            x, tx = leaf * 1, tleaf * 1
            loss, tloss = (x * leaf).sum(), (tx * tleaf).sum()
            x.fill_(0.0)
            tx.fill_(0.0)
        else:  # an operand that does not require grad, changed under no_grad
            c, tc = et.from_numpy(a.copy()), torch.from_numpy(a.copy())
            loss, tloss = (leaf * c).sum(), (tleaf * tc).sum()
            with et.no_grad():
                c.mul_(3.0)
            with torch.no_grad():
                tc.mul_(3.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            tloss.backward()
        with pytest.raises(et.EnkaiError) as e:
            loss.backward()
        assert e.value.code == "E_AUTOGRAD" and "modified by an inplace operation" in str(e.value), step


def test_an_op_that_saves_nothing_does_not_refuse():
    """add saves no operand: overwriting one afterwards is fine (as in PyTorch)."""
    a = arr(3, 4)
    leaf, tleaf = et.from_numpy(a).require_grad(), torch.from_numpy(a).requires_grad_()
    x, tx = leaf * 1, tleaf * 1
    y, ty = x + 2.0, tx + 2.0
    x.copy_(et.from_numpy(np.ones((4,), np.float32)))
    tx.copy_(torch.ones(4))
    (y.sum() + x.sum()).backward()
    (ty.sum() + tx.sum()).backward()
    np.testing.assert_array_equal(leaf.grad.numpy(), tleaf.grad.numpy())


def test_an_optimizer_step_counts_as_a_write():
    a = arr(4, 4)
    p = et.from_numpy(a).require_grad()
    opt = et.AdamW([p], lr=0.1)
    (p.sum()).backward()
    loss = (p * p).sum()  # saves p
    opt.step()
    with pytest.raises(et.EnkaiError) as e:
        loss.backward()
    assert e.value.code == "E_AUTOGRAD"


def test_refusals_match_pytorch():
    ints = et.from_numpy(np.arange(4, dtype=np.int64))
    with pytest.raises(et.EnkaiError) as e:
        ints.add_(0.5)  # torch: result type Float can't be cast to the desired output type Long
    assert e.value.code == "E_DTYPE", e.value
    with pytest.raises(et.EnkaiError) as e:
        et.from_numpy(arr(4)).add_(et.from_numpy(arr(3, 4)))  # broadcasting past self
    assert e.value.code == "E_SHAPE", e.value
    with pytest.raises(et.EnkaiError) as e:
        et.op("expand", et.from_numpy(arr(1)), size=[4]).add_(1.0)  # one element, four places
    assert e.value.code in ("E_INVALID_ARG", "E_TORCH"), e.value
    filled = et.op("expand", et.from_numpy(arr(1)), size=[4]).fill_(1.0)  # one value: PyTorch allows it
    np.testing.assert_array_equal(filled.numpy(), np.ones(4, np.float32))
    np.testing.assert_array_equal(ints.numpy(), np.arange(4))


def test_in_place_on_a_view_rewrites_the_base_history():
    """PyTorch's CopySlices: the base's gradient goes through the write made
    through its view (a row, a transposed column, a reshape)."""
    a, w = arr(3, 4), arr(4, seed=2)
    for view in ("select", "permute", "reshape"):
        leaf, tleaf = et.from_numpy(a).require_grad(), torch.from_numpy(a).requires_grad_()
        lw, tw = et.from_numpy(w).require_grad(), torch.from_numpy(w).requires_grad_()
        b, tb = leaf * 1, tleaf * 1
        if view == "select":
            v, tv = et.op("select", b, dim=0, index=1), tb.select(0, 1)
            v.mul_(lw)
            tv.mul_(tw)
        elif view == "permute":
            v, tv = et.op("permute", b, dims=[1, 0]), tb.permute(1, 0)
            v.add_(et.op("unsqueeze", lw, dim=1), alpha=-2)
            tv.add_(tw.unsqueeze(1), alpha=-2)
        else:
            v, tv = b.reshape([12]), tb.reshape(12)
            v.clamp_(min=-0.5, max=0.5)
            tv.clamp_(min=-0.5, max=0.5)
        loss, tloss = (b * b).sum() + v.sum(), (tb * tb).sum() + tv.sum()
        loss.backward()
        tloss.backward()
        np.testing.assert_array_equal(b.numpy(), tb.detach().numpy())
        np.testing.assert_allclose(leaf.grad.numpy(), tleaf.grad.numpy(), rtol=1e-6, err_msg=view)
        if view != "reshape":
            np.testing.assert_allclose(lw.grad.numpy(), tw.grad.numpy(), rtol=1e-6, err_msg=view)


def test_views_of_leaves_and_stale_views(backend):
    a = arr(3, 4)
    leaf, tleaf = et.from_numpy(a).require_grad(), torch.from_numpy(a).requires_grad_()
    with pytest.raises(RuntimeError, match="a view of a leaf Variable"):
        tleaf.select(0, 0).mul_(2.0)
    with pytest.raises(et.EnkaiError) as e:
        et.op("select", leaf, dim=0, index=0).mul_(2.0)
    assert e.value.code == "E_AUTOGRAD" and "view of a leaf" in str(e.value)
    # A view made before its base was written in place: libtorch regenerates
    # its history; the cpu backend refuses its backward, never a wrong gradient.
    b, tb = leaf * 1, tleaf * 1
    v, tv = et.op("select", b, dim=0, index=0), tb.select(0, 0)
    b.mul_(2.0)
    tb.mul_(2.0)
    tv.sum().backward()
    if backend == "torch":
        v.sum().backward()
        np.testing.assert_array_equal(leaf.grad.numpy(), tleaf.grad.numpy())
    else:
        with pytest.raises(et.EnkaiError) as e:
            v.sum().backward()
        assert e.value.code == "E_AUTOGRAD" and "view" in str(e.value)


def test_nothing_leaks():
    gc.collect()
    before = et.live()["tensors"]
    x = et.from_numpy(arr(3, 4))
    for _ in range(3):
        x.add_(1.0).mul_(0.5)
        x.clamp_(min=-1.0, max=1.0)
        x.masked_fill_(et.from_numpy(np.eye(3, 4, dtype=bool)), 0.0)
    del x
    gc.collect()
    assert et.live()["tensors"] == before
