"""Freezing, `Tensor.requires_grad_(False)` (enkai_tensor_requires_grad_),
against PyTorch on the same values: a frozen leaf gets no gradient while
the others get PyTorch's, results of ops on frozen leaves alone record
nothing, unfreezing restores the gradient, a grad a leaf had before it
was frozen stays, and an optimizer skips a frozen parameter that has no
grad. fp64 throughout, so the gradients are held to 1e-12 relative."""

import numpy as np
import pytest
import torch

import enkai_tensor as et
from helpers import to_et, to_torch

pytestmark = pytest.mark.usefixtures("backend")


def sq(t):
    return t * t


def close(e, t):
    np.testing.assert_allclose(to_torch(e).numpy(), t.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_a_frozen_leaf_gets_no_gradient():
    g = torch.Generator().manual_seed(1)
    x_t = torch.randn(4, 3, generator=g, dtype=torch.float64)
    w1_t = torch.randn(3, 5, generator=g, dtype=torch.float64).requires_grad_()
    w2_t = torch.randn(5, 2, generator=g, dtype=torch.float64).requires_grad_()
    x, w1, w2 = to_et(x_t), to_et(w1_t).require_grad(), to_et(w2_t).require_grad()
    assert w1.requires_grad and w2.requires_grad and not x.requires_grad
    w1_t.requires_grad_(False)
    w1.requires_grad_(False)
    assert not w1.requires_grad
    (torch.tanh(x_t @ w1_t) @ w2_t).pow(2).sum().backward()
    sq((x @ w1).tanh() @ w2).sum().backward()
    assert w1.grad is None and w1_t.grad is None
    close(w2.grad, w2_t.grad)
    # Ops on frozen leaves alone record nothing.
    assert not (x @ w1).requires_grad and not (x_t @ w1_t).requires_grad
    # Unfrozen, it gets PyTorch's gradient again; w2's accumulates.
    w1_t.requires_grad_(True)
    w1.requires_grad_(True)
    (torch.tanh(x_t @ w1_t) @ w2_t).pow(2).sum().backward()
    sq((x @ w1).tanh() @ w2).sum().backward()
    close(w1.grad, w1_t.grad)
    close(w2.grad, w2_t.grad)
    # Frozen again, its grad stays as it was (PyTorch leaves .grad alone), and
    # the next backward adds nothing to it.
    w1_t.requires_grad_(False)
    w1.requires_grad_(False)
    (torch.tanh(x_t @ w1_t) @ w2_t).pow(2).sum().backward()
    sq((x @ w1).tanh() @ w2).sum().backward()
    close(w1.grad, w1_t.grad)
    close(w2.grad, w2_t.grad)


def test_the_optimizer_skips_a_frozen_parameter_without_grad():
    g = torch.Generator().manual_seed(2)
    a_t = torch.randn(3, generator=g, dtype=torch.float64)
    b_t = torch.randn(3, generator=g, dtype=torch.float64).requires_grad_()
    a, b = to_et(a_t).require_grad(), to_et(b_t).require_grad()
    a.requires_grad_(False)
    opt_t = torch.optim.AdamW([a_t.requires_grad_(), b_t], lr=0.1)
    a_t.requires_grad_(False)
    opt = et.AdamW([a, b], lr=0.1)
    for _ in range(3):
        opt_t.zero_grad()
        et.zero_grad_multi([a, b])
        (a_t * b_t).sum().backward()
        (a * b).sum().backward()
        opt_t.step()
        opt.step()
    close(a, a_t)
    close(b, b_t)
    np.testing.assert_array_equal(to_torch(a).numpy(), a_t.detach().numpy())


def test_refusals():
    a = to_et(torch.ones(3, dtype=torch.float64)).require_grad()
    y = a * 2
    with pytest.raises(et.EnkaiError) as e:
        y.requires_grad_(False)
    assert e.value.code == "E_AUTOGRAD" and "leaf variables" in str(e.value)
    with pytest.raises(RuntimeError, match="leaf variables"):
        (torch.ones(3, requires_grad=True) * 2).requires_grad_(False)
    y.requires_grad_(True)  # a computed tensor keeps its flag: allowed, as in PyTorch
    with pytest.raises(et.EnkaiError) as e:
        to_et(torch.ones(3, dtype=torch.int64)).requires_grad_(True)
    assert e.value.code == "E_DTYPE"
    to_et(torch.ones(3, dtype=torch.int64)).requires_grad_(False)  # nothing to clear: allowed
    assert et.lib.enkai_tensor_requires_grad_(987654321, 0) == 1
    assert et.lib.enkai_tensor_last_error_code() != 0
    assert et.lib.enkai_tensor_requires_grad(987654321) == -1
