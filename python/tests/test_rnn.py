"""`lstm`, `gru` and their cells against `torch.nn.LSTM`/`GRU` modules:
the weights are the module's `state_dict` (its `_flat_weights` order),
passed unchanged, over longer sequences, several layers, both directions
and `batch_first` than the op table's small cases; values and the
gradients of the input, the initial states and every weight.

Tolerance: fp64 within 1e-10 relative (the same products summed in
another order, through tens of steps)."""

import numpy as np
import pytest
import torch

import enkai_tensor as et

pytestmark = pytest.mark.usefixtures("backend")


def ours(t, grad=True):
    x = et.from_numpy(t.detach().numpy().copy())
    return x.require_grad() if grad else x


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("layers, bidirectional, batch_first, bias", [
    (1, False, False, True),
    (2, True, True, True),
    (3, False, True, False),
])
def test_sequence_layer_equals_the_torch_module(kind, layers, bidirectional, batch_first, bias):
    torch.manual_seed(0)
    mod = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(
        6, 7, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first, bias=bias).double()
    dirs = 2 if bidirectional else 1
    x = torch.randn((3, 25, 6) if batch_first else (25, 3, 6), dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(layers * dirs, 3, 7, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(layers * dirs, 3, 7, dtype=torch.float64, requires_grad=True)
    ref = mod(x, (h0, c0) if kind == "lstm" else h0)
    ref_out, ref_state = ref[0], ref[1] if kind == "gru" else ref[1]
    params = [ours(p) for p in mod._flat_weights]
    ox, oh, oc = ours(x), ours(h0), ours(c0)
    kw = dict(has_biases=bias, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first)
    got = et.op(kind, ox, oh, oc, params, **kw) if kind == "lstm" else et.op(kind, ox, oh, params, **kw)
    refs = [ref_out] + (list(ref_state) if kind == "lstm" else [ref_state])
    assert len(got) == len(refs)
    rng = np.random.default_rng(1)
    loss_ours, loss_ref = None, 0
    for g, r in zip(got, refs):
        np.testing.assert_allclose(g.numpy(), r.detach().numpy(), rtol=1e-10, atol=1e-12)
        w = rng.normal(size=tuple(r.shape))
        term = (g * et.from_numpy(w)).sum()
        loss_ours = term if loss_ours is None else loss_ours + term
        loss_ref = loss_ref + (r * torch.from_numpy(w)).sum()
    loss_ours.backward()
    leaves = [x, h0] + ([c0] if kind == "lstm" else []) + list(mod._flat_weights)
    mine = [ox, oh] + ([oc] if kind == "lstm" else []) + params
    for a, b in zip(mine, torch.autograd.grad(loss_ref, leaves)):
        np.testing.assert_allclose(a.grad.numpy(), b.numpy(), rtol=1e-9, atol=1e-11)


def test_cells_equal_the_torch_cells():
    torch.manual_seed(1)
    lc, gc = torch.nn.LSTMCell(4, 5).double(), torch.nn.GRUCell(4, 5).double()
    x, h, c = (torch.randn(3, n, dtype=torch.float64) for n in (4, 5, 5))
    h2, c2 = et.op("lstm_cell", ours(x), ours(h), ours(c), *[ours(p) for p in (lc.weight_ih, lc.weight_hh, lc.bias_ih, lc.bias_hh)])
    rh, rc = lc(x, (h, c))
    np.testing.assert_allclose(h2.numpy(), rh.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(c2.numpy(), rc.detach().numpy(), rtol=1e-12)
    g = et.op("gru_cell", ours(x), ours(h), *[ours(p) for p in (gc.weight_ih, gc.weight_hh, gc.bias_ih, gc.bias_hh)])
    np.testing.assert_allclose(g.numpy(), gc(x, h).detach().numpy(), rtol=1e-12)


def test_wrong_weights_and_states_are_refused():
    x = et.from_numpy(np.zeros((4, 2, 3)))
    h = et.from_numpy(np.zeros((1, 2, 5)))
    ws = [et.from_numpy(np.zeros(s)) for s in ((20, 3), (20, 5), (20,), (20,))]
    with pytest.raises(et.EnkaiError):
        et.op("lstm", x, h, h, ws[:3])  # a weight short
    with pytest.raises(et.EnkaiError):
        et.op("lstm", x, et.from_numpy(np.zeros((2, 2, 5))), h, ws)  # hx for 2 layers
    with pytest.raises(et.EnkaiError):
        et.op("gru", x, h, ws)  # LSTM-sized weights for a GRU
    # A w_ih narrower than the input: PyTorch's kernel would read past it; both backends refuse.
    narrow = [et.from_numpy(np.zeros((20, 4)))] + ws[1:]
    with pytest.raises(et.EnkaiError) as e:
        et.op("lstm", x, h, h, narrow)
    assert e.value.code == "E_SHAPE" and "w_ih" in str(e.value)
    with pytest.raises(et.EnkaiError) as e:
        et.op("lstm_cell", et.from_numpy(np.zeros((2, 3))), et.from_numpy(np.zeros((2, 5))), et.from_numpy(np.zeros((2, 5))), *narrow)
    assert e.value.code == "E_SHAPE"
    with pytest.raises(et.EnkaiError) as e:
        et.op("lstm", x, h, h, [w.to_dtype("fp32") for w in ws])  # fp32 weights, fp64 input
    assert e.value.code == "E_DTYPE"
