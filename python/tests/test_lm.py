"""The LM helpers against the same model written in PyTorch (lm_reference.py),
on both backends.

On both backends `lm_init` draws the reference's weights exactly (the
native generator is PyTorch's CPU generator). On the torch backend the
forward runs the reference's libtorch ops, so everything is exact; on the
native one losses and gradients are sums and chains of roundings: helpers'
"reduce" class (under bf16 autocast, that class for bf16, the dtype the
matmuls ran in).
"""

import pytest
import torch

import enkai_tensor as et
import lm_reference as ref
from helpers import run_in_threads, same, to_torch

pytestmark = pytest.mark.usefixtures("backend")


def native():
    return et.backend_current() == "cpu"


def model(spec, seed):
    """The same weights on both sides: `lm_init`'s, checked bit-equal to the
    reference's init."""
    tps = ref.init(spec, seed)
    eps_ = et.lm_init(spec, seed=seed)
    assert len(eps_) == len(tps)
    for e, t in zip(eps_, tps):
        assert torch.equal(to_torch(e), t.detach())
    return eps_, tps

SPECS = [
    {"vocab_size": 17, "seq_len": 8, "d_model": 16, "n_layers": 2, "n_heads": 4},
    {"vocab_size": 11, "seq_len": 6, "d_model": 12, "n_layers": 1, "n_heads": 3, "ff_mult": 2,
     "activation": "silu", "norm": "rmsnorm", "tie_embeddings": True},
    {"vocab_size": 9, "seq_len": 5, "d_model": 8, "n_layers": 1, "n_heads": 2, "activation": "relu"},
]


def batch_of(spec, b, s, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, spec["vocab_size"], (b, s), generator=g)
    y = torch.randint(0, spec["vocab_size"], (b, s), generator=g)
    return x, y


@pytest.mark.parametrize("spec", SPECS, ids=["default", "rms-silu-tied", "relu"])
def test_lm_init_loss_and_grads_match_pytorch(spec):
    eps_, tps = model(spec, 11)
    x, y = batch_of(spec, 3, spec["seq_len"] - 1, 1)
    loss_t = ref.forward(tps, spec, x, y)
    loss_e = et.forward_lm(eps_, spec, x.flatten().tolist(), y.flatten().tolist(), 3, spec["seq_len"] - 1)
    same(loss_e, loss_t, kind="reduce")
    loss_t.backward()
    loss_e.backward()
    for i, (e, t) in enumerate(zip(eps_, tps)):
        same(e.grad, t.grad, kind="reduce")
    # the logits behind the loss, for sampling
    logits = et.lm_logits(eps_, spec, x.flatten().tolist(), 3, spec["seq_len"] - 1)
    assert logits.shape == (3, spec["seq_len"] - 1, spec["vocab_size"])
    same(et.cross_entropy(logits.reshape(-1, spec["vocab_size"]), et.from_numpy(y.flatten().numpy())), loss_t, kind="reduce")


def test_tinylm_matches_pytorch_and_trains():
    spec = {"vocab_size": 13, "seq_len": 8, "d_model": 16, "n_layers": 2, "n_heads": 2}
    eps_ = et.tinylm_init(13, 8, 16, 2, 2, seed=3)
    assert len(eps_) == 6 + 12 * 2
    tps = ref.init(spec, 3)
    assert all(torch.equal(to_torch(e), t.detach()) for e, t in zip(eps_, tps))
    x, y = batch_of(spec, 2, 8, 2)
    loss_e = et.forward_tinylm(eps_, x.flatten().tolist(), y.flatten().tolist(), 2, 8, 2)
    loss_t = ref.forward(tps, spec, x, y)
    same(loss_e, loss_t, kind="reduce")
    # a few AdamW steps lower the loss
    opt = et.AdamW(eps_, lr=3e-3)
    first = loss_e.item()
    for _ in range(5):
        et.zero_grad_multi(eps_)
        loss = et.forward_tinylm(eps_, x.flatten().tolist(), y.flatten().tolist(), 2, 8, 2)
        loss.backward()
        opt.step()
    assert et.forward_tinylm(eps_, x.flatten().tolist(), y.flatten().tolist(), 2, 8, 2).item() < first


def test_lm_under_autocast_matches_pytorch_autocast():
    spec = SPECS[0]
    eps_, tps = model(spec, 5)
    x, y = batch_of(spec, 2, 6, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss_t = ref.forward(tps, spec, x, y)
    with et.autocast():
        loss_e = et.forward_lm(eps_, spec, x.flatten().tolist(), y.flatten().tolist(), 2, 6)
    same(loss_e, loss_t, kind="reduce", like=torch.bfloat16)
    loss_t.backward()
    loss_e.backward()
    for e, t in zip(eps_, tps):
        same(e.grad, t.grad, kind="reduce", like=torch.bfloat16)


def test_dropout_only_in_training():
    spec = dict(SPECS[0], dropout=0.5)
    eps_ = et.lm_init(spec, seed=1)
    x, y = batch_of(spec, 2, 4, 4)
    args = (x.flatten().tolist(), y.flatten().tolist(), 2, 4)
    a, b = et.forward_lm(eps_, spec, *args).item(), et.forward_lm(eps_, spec, *args).item()
    assert a == b
    et.manual_seed(9)
    c1 = et.forward_lm(eps_, spec, *args, training=True).item()
    et.manual_seed(9)
    assert et.forward_lm(eps_, spec, *args, training=True).item() == c1  # seeded: reproducible
    assert c1 != a
    tps = ref.init(spec, 1)
    et.manual_seed(9)
    c = et.forward_lm(eps_, spec, *args, training=True)
    torch.manual_seed(9)
    same(c, ref.forward(tps, spec, x, y, training=True), kind="reduce")  # the same dropout masks


@pytest.mark.parametrize("spec,code,text", [
    ({"vocab_size": 5}, "E_INVALID_ARG", "missing required key"),
    ({"vocab_size": 5, "seq_len": 4, "d_model": 6, "n_layers": 1, "n_heads": 4}, "E_INVALID_ARG", "not a multiple"),
    ({"vocab_size": 5, "seq_len": 4, "d_model": 8, "n_layers": 1, "n_heads": 2, "norm": "batchnorm"},
     "E_INVALID_ARG", "batchnorm"),
    ("{not json", "E_INVALID_ARG", "not JSON"),
])
def test_lm_spec_errors(spec, code, text):
    with pytest.raises(et.EnkaiError) as ex:
        et.lm_init(spec)
    assert ex.value.code == code and text in str(ex.value)


def test_forward_errors():
    ps = et.tinylm_init(7, 4, 8, 1, 2)
    with pytest.raises(et.EnkaiError) as ex:
        et.forward_tinylm(ps, [1, 2, 3], [1, 2, 3], 1, 4, 2)
    assert ex.value.code == "E_SHAPE"
    with pytest.raises(et.EnkaiError) as ex:
        et.forward_tinylm(ps, [1, 2, 3, 7], [1, 2, 3, 0], 1, 4, 2)
    assert ex.value.code == "E_INVALID_ARG" and "vocab_size 7" in str(ex.value)
    with pytest.raises(et.EnkaiError) as ex:
        et.forward_tinylm(ps, [0] * 10, [0] * 10, 2, 5, 2)
    assert ex.value.code == "E_SHAPE" and "seq_len" in str(ex.value)
    with pytest.raises(et.EnkaiError) as ex:
        et.forward_tinylm(ps[:-1], [0] * 4, [0] * 4, 1, 4, 2)
    assert ex.value.code == "E_INVALID_ARG"


def test_seeded_inits_on_several_threads_get_their_own_seeds_weights():
    """lm_init draws from a generator of its own: concurrent inits cannot
    interleave their draws, and the process's generator is not reseeded."""
    spec = {"vocab_size": 16, "seq_len": 4, "d_model": 8, "n_layers": 1, "n_heads": 2}
    alone = {s: et.lm_init(spec, seed=s)[0].tolist() for s in range(4)}
    et.manual_seed(5)
    expected_next = et.randn([3]).tolist()
    et.manual_seed(5)
    wrong = []

    def run(seed):
        for _ in range(40):
            if et.lm_init(spec, seed=seed)[0].tolist() != alone[seed]:
                wrong.append(seed)

    run_in_threads(run, 4)
    assert wrong == []
    assert et.randn([3]).tolist() == expected_next


def test_native_generator_statistics():
    """The native generator draws what `randn`, `lm_init` and
    `dropout` promise, reproducibly for a seed. Bounds are 6 standard errors
    of the statistic, so a correct generator fails about once in 10^9 runs."""
    if not native():
        pytest.skip("torch's own generator is compared for equality above")
    spec = {"vocab_size": 64, "seq_len": 16, "d_model": 64, "n_layers": 1, "n_heads": 4}
    ps = [to_torch(p) for p in et.lm_init(spec, seed=7)]
    again = [to_torch(p) for p in et.lm_init(spec, seed=7)]
    other = [to_torch(p) for p in et.lm_init(spec, seed=8)]
    assert all(torch.equal(a, b) for a, b in zip(ps, again))
    assert not torch.equal(ps[0], other[0])
    layout = ref.init(spec, 0)  # shapes and which are ones/zeros
    normal = torch.cat([p.flatten() for p, t in zip(ps, layout) if t.abs().sum() and not torch.all(t == 1)])
    n = normal.numel()
    assert abs(float(normal.mean())) < 6 * 0.02 / n ** 0.5
    assert abs(float(normal.std()) / 0.02 - 1) < 6 / (2 * n) ** 0.5
    for p, t in zip(ps, layout):
        if torch.all(t == 1) or not t.abs().sum():
            assert torch.equal(p, t)  # ones and zeros exactly
    et.manual_seed(3)
    a = to_torch(et.randn([100000]))
    assert abs(float(a.mean())) < 6 / 1e5 ** 0.5 and abs(float(a.std()) - 1) < 6 / (2e5) ** 0.5
    for p in (0.1, 0.5, 0.9):
        x = et.ones([200000])
        y = to_torch(et.dropout(x, p, True))
        kept = y != 0
        ratio = float(kept.float().mean())
        assert abs(ratio - (1 - p)) < 6 * (p * (1 - p) / 2e5) ** 0.5
        assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / (1 - p)))
    et.manual_seed(4)
    d1 = to_torch(et.dropout(et.ones([1000]), 0.5, True))
    et.manual_seed(4)
    assert torch.equal(d1, to_torch(et.dropout(et.ones([1000]), 0.5, True)))
