"""The losses, embedding, one_hot and pad beyond the op table's generated
cases (`test_op_table.py` checks every row's values and gradients over
dtypes and reductions): larger class counts and spatial targets, every
cross_entropy option at once, kl_div's `batchmean`, and the errors both
backends must give alike. PyTorch's `torch.nn.functional` is the oracle.

Tolerance: fp64 results and gradients within 1e-10 relative (sums in
another order than PyTorch's), fp32 within 1e-5 relative / 1e-6 absolute."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import enkai_tensor as et

pytestmark = pytest.mark.usefixtures("backend")


def both(a, grad=False):
    ours, theirs = et.from_numpy(a), torch.from_numpy(a.copy())
    if grad:
        ours.require_grad()
        theirs.requires_grad_()
    return ours, theirs


def close(ours, theirs, rtol=1e-10, atol=1e-12):
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("target_kind", ["index", "probs"])
def test_cross_entropy_spatial_with_every_option(reduction, target_kind):
    """[N, C, H, W] logits, class weights, label smoothing, and (for class
    targets) an ignored class: values and gradients in fp64."""
    rng = np.random.default_rng(3)
    x, tx = both(rng.normal(0, 2, (3, 7, 4, 5)), grad=True)
    w, tw = both(rng.uniform(0.2, 2, 7))
    if target_kind == "index":
        ids = rng.integers(0, 7, (3, 4, 5))
        t, tt = both(ids)
        kw = {"ignore_index": 2, "label_smoothing": 0.15, "reduction": reduction}
    else:
        p = rng.uniform(0, 1, (3, 7, 4, 5))
        t, tt = both(p / p.sum(1, keepdims=True), grad=True)
        kw = {"label_smoothing": 0.15, "reduction": reduction}
    ours = et.op("cross_entropy", x, t, w, **kw)
    ref = F.cross_entropy(tx, tt, tw, **kw)
    close(ours, ref)
    gw = rng.normal(size=tuple(ref.shape))
    (ours * et.from_numpy(gw)).sum().backward()
    grads = torch.autograd.grad((ref * torch.from_numpy(gw)).sum(), [tx] + ([tt] if target_kind == "probs" else []))
    close(x.grad, grads[0])
    if target_kind == "probs":
        close(t.grad, grads[1])


def test_cross_entropy_over_a_large_vocabulary_in_fp32():
    """An LM's loss: 64 rows over 5,000 classes, fp32, against PyTorch."""
    rng = np.random.default_rng(4)
    x, tx = both(rng.normal(0, 3, (64, 5000)).astype(np.float32), grad=True)
    t, tt = both(rng.integers(0, 5000, 64))
    ours, ref = et.op("cross_entropy", x, t), F.cross_entropy(tx, tt)
    close(ours, ref, rtol=1e-5, atol=1e-6)
    ours.backward()
    ref.backward()
    close(x.grad, tx.grad, rtol=1e-5, atol=1e-8)


def test_every_row_ignored_gives_nan_as_pytorch():
    x, tx = both(np.zeros((3, 4)))
    t, tt = both(np.full(3, -100))
    assert np.isnan(et.op("cross_entropy", x, t).numpy()) and torch.isnan(F.cross_entropy(tx, tt))
    assert np.isnan(et.op("nll_loss", x, t).numpy())


@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_batchmean_is_the_sum_over_the_batch(log_target):
    rng = np.random.default_rng(5)
    x, tx = both(np.log(rng.dirichlet(np.ones(6), 4)), grad=True)
    p = rng.dirichlet(np.ones(6), 4)
    t, tt = both(np.log(p) if log_target else p)
    ours = et.op("kl_div", x, t, reduction="batchmean", log_target=log_target)
    ref = F.kl_div(tx, tt, reduction="batchmean", log_target=log_target)
    close(ours, ref)
    ours.backward()
    ref.backward()
    close(x.grad, tx.grad)


def test_bce_with_logits_is_stable_for_large_logits():
    """log(1 + exp(-|x|)) keeps ±100 logits finite, as PyTorch's."""
    x, tx = both(np.array([-100.0, -30.0, 0.0, 30.0, 100.0]), grad=True)
    t, tt = both(np.array([1.0, 0.0, 0.5, 1.0, 0.0]))
    pw, tpw = both(np.array([2.0]))
    ours = et.op("binary_cross_entropy_with_logits", x, t, None, pw, reduction="none")
    ref = F.binary_cross_entropy_with_logits(tx, tt, pos_weight=tpw, reduction="none")
    close(ours, ref)
    (ours.sum()).backward()
    ref.sum().backward()
    close(x.grad, tx.grad)


def test_embedding_padding_row_gets_no_gradient_and_frequencies_scale():
    rng = np.random.default_rng(6)
    w, tw = both(rng.normal(size=(6, 3)), grad=True)
    ids, tids = both(np.array([[0, 2, 2], [5, 2, 1]]))
    ours = et.op("embedding", ids, w, padding_idx=-1, scale_grad_by_freq=True)
    ref = F.embedding(tids, tw, padding_idx=-1, scale_grad_by_freq=True)
    close(ours, ref)
    g = rng.normal(size=(2, 3, 3))
    (ours * et.from_numpy(g)).sum().backward()
    (ref * torch.from_numpy(g)).sum().backward()
    close(w.grad, tw.grad)
    assert not w.grad.numpy()[5].any()


def test_errors_are_the_same_on_both_backends():
    x = et.from_numpy(np.zeros((3, 4)))
    ids = et.from_numpy(np.array([0, 1, 2]))
    w = et.from_numpy(np.zeros((5, 2)))
    cases = [
        (lambda: et.op("mse_loss", x, x, reduction="avg"), "E_INVALID_ARG", "not a valid value for reduction"),
        (lambda: et.op("mse_loss", x, x, reduction="batchmean"), "E_INVALID_ARG", "not a valid value for reduction"),
        (lambda: et.op("embedding", ids, w, padding_idx=5), "E_INVALID_ARG", "padding_idx 5 must be within num_embeddings 5"),
        (lambda: et.op("embedding", ids, w, padding_idx=-6), "E_INVALID_ARG", "must be within num_embeddings"),
    ]
    for fn, code, text in cases:
        with pytest.raises(et.EnkaiError) as e:
            fn()
        assert e.value.code == code and text in str(e.value), str(e.value)


def test_dropout2d_zeroes_whole_channels_and_scales_the_rest():
    """Each (n, c) channel is all kept (times 1/(1-p)) or all zero; the
    kept fraction is near 1-p; the gradient is the same mask; eval and p=0
    return the input."""
    x = et.from_numpy(np.ones((40, 50, 3, 2), dtype=np.float32)).require_grad()
    y = et.op("dropout2d", x, p=0.3)
    v = y.numpy()
    per_channel = v.reshape(40, 50, -1)
    assert np.all(per_channel.min(-1) == per_channel.max(-1))
    kept = per_channel[:, :, 0] != 0
    assert abs(kept.mean() - 0.7) < 0.05
    np.testing.assert_allclose(per_channel[kept], np.float32(1 / np.float32(0.7)), rtol=1e-6)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), v)
    np.testing.assert_array_equal(et.op("dropout2d", x, p=0.3, training=False).numpy(), x.numpy())
    assert not et.op("dropout2d", x, p=1.0).numpy().any()
    with pytest.raises(et.EnkaiError) as e:
        et.op("dropout2d", x, p=1.5)
    assert e.value.code == "E_INVALID_ARG"


def test_dropout_by_its_functional_name():
    x = et.from_numpy(np.ones((200, 50), dtype=np.float32))
    v = et.op("dropout", x, p=0.25).numpy()
    assert abs((v != 0).mean() - 0.75) < 0.02
    np.testing.assert_allclose(v[v != 0], np.float32(1 / np.float32(0.75)), rtol=1e-6)
    np.testing.assert_array_equal(et.op("dropout", x, training=False).numpy(), x.numpy())
