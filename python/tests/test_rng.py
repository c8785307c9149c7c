"""The generator against PyTorch's CPU generator: after `et.manual_seed(s)`,
each random op gives exactly the values that `torch.manual_seed(s)` and the
same torch call give (bit for bit, the sign of zero included), call after
call. The native backend reproduces mt19937 and ATen's CPU kernels; the torch
backend is torch. The generator's state is `torch.get_rng_state()`'s.

Skipped where PyTorch itself runs MKL's own generator (an Intel CPU in an
MKL build): bernoulli with a scalar p (so dropout) and exponential (so
multinomial without replacement)."""

import hashlib
import json
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

import enkai_tensor as et

pytestmark = pytest.mark.usefixtures("backend")

FLOATS = {"fp32": torch.float32, "fp64": torch.float64, "fp16": torch.float16, "bf16": torch.bfloat16}
INTS = {"int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
        "bool": torch.bool}
SEEDS = [0, 7, 2**40 + 3, -5]
# 0-dim, under 16 (the serial kernels), 16 and ragged multiples (normal_fill's redrawn tail), large.
SHAPES = [[], [1], [5], [15], [16], [17], [3, 11], [64], [1001], [70000]]


def intel_mkl():
    if not torch.backends.mkl.is_available():
        return False
    with open("/proc/cpuinfo") as f:
        return "GenuineIntel" in f.read()


mkl_only = pytest.mark.skipif(intel_mkl(), reason="PyTorch draws these from MKL's generator on an Intel CPU")


def same(got, ref):
    """Bit-exact equality of an enkai result with a torch one."""
    assert tuple(got.shape) == tuple(ref.shape)
    if ref.dtype.is_floating_point:
        g, r = got.to_dtype("fp64").numpy(), ref.double().numpy()
        np.testing.assert_array_equal(g.view(np.int64), r.view(np.int64))
    else:
        np.testing.assert_array_equal(got.numpy().astype(np.int64), ref.numpy().astype(np.int64))


def both(seed, ours, theirs):
    """Each pair of calls after the same seed, in turn, so the streams advance alike."""
    et.manual_seed(seed)
    got = [f() for f in ours]
    torch.manual_seed(seed)
    for g, r in zip(got, [f() for f in theirs]):
        same(g, r)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("seed", SEEDS)
def test_rand(seed, dtype):
    for shape in SHAPES:
        both(seed, [lambda: et.op("rand", size=shape, dtype=dtype)] * 2, [lambda: torch.rand(shape, dtype=FLOATS[dtype])] * 2)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("seed", SEEDS)
def test_randn(seed, dtype):
    for shape in SHAPES:
        # randn_like twice, then the factory: the serial kernel's cached sine carries over.
        ours = [lambda: et.op("randn_like", et.zeros(shape, dtype=dtype))] * 2 + [lambda: et.randn(shape, dtype)]
        both(seed, ours, [lambda: torch.randn(shape, dtype=FLOATS[dtype])] * 3)


def test_randn_sequence_keeps_the_cached_normal():
    sizes = [1, 3, 16, 1, 2, 17, 5, 1, 40, 1]
    both(11, [lambda n=n: et.randn([n]) for n in sizes], [lambda n=n: torch.randn(n) for n in sizes])
    both(12, [lambda n=n: et.randn([n], "fp64") for n in sizes], [lambda n=n: torch.randn(n, dtype=torch.float64) for n in sizes])


# Ranges past what fp32/bf16/fp16 represent exactly, on purpose (torch warns; the values must still match).
@pytest.mark.filterwarnings("ignore:(to - 1|from) is out of bounds:UserWarning")
@pytest.mark.parametrize("dtype", list(INTS) + list(FLOATS))
@pytest.mark.parametrize("seed", SEEDS)
def test_randint(seed, dtype):
    tdt = {**INTS, **FLOATS}[dtype]
    if dtype == "bool":
        ranges = [(0, 2), (1, 2)]
    elif dtype in ("uint8", "int8"):
        ranges = [(0, 100), (3, 7)] if dtype == "int8" else [(0, 256), (200, 255)]
    elif dtype in ("int16", "fp16", "bf16"):
        ranges = [(0, 10), (-300, 200)]
    elif dtype in ("int32", "fp32"):
        # 2^28 and above take 64-bit draws.
        ranges = [(0, 10), (-(2**20), 2**20), (0, 2**28 - 1), (0, 2**28), (-(2**24), 2**24)]
    else:
        ranges = [(0, 10), (-(2**30), 2**30), (0, 2**28), (-(2**50), 2**53)]
    for shape in [[], [7], [33], [5000]]:
        for lo, hi in ranges:
            ours = [lambda: et.op("randint", high=hi, size=shape, dtype=dtype)] if lo == 0 else []
            ours.append(lambda: et.op("randint", low=lo, high=hi, size=shape, dtype=dtype))
            theirs = [lambda: torch.randint(hi, shape, dtype=tdt)] if lo == 0 else []
            theirs.append(lambda: torch.randint(lo, hi, shape, dtype=tdt))
            both(seed, ours, theirs)
    both(3, [lambda: et.op("randint", high=2**62, size=[100])], [lambda: torch.randint(2**62, [100])])


@pytest.mark.parametrize("dtype", FLOATS)
def test_bernoulli_with_probabilities(dtype):
    rng = np.random.default_rng(1)
    for shape in [[], [5], [16], [3, 50], [20000]]:
        p = np.asarray(rng.random(shape))
        p.flat[:3] = [0.0, 1.0, 0.5][: p.size]
        pt = torch.from_numpy(np.asarray(p)).to(FLOATS[dtype])
        ours = et.from_numpy(np.asarray(p)).to_dtype(dtype)
        both(4, [lambda: et.op("bernoulli", ours)] * 2, [lambda: torch.bernoulli(pt)] * 2)


@mkl_only
@pytest.mark.parametrize("dtype", FLOATS)
def test_bernoulli_p_and_dropout(dtype):
    rng = np.random.default_rng(2)
    for shape in [[5], [16], [40, 25]]:
        x = rng.standard_normal(shape)
        xt, xe = torch.from_numpy(x).to(FLOATS[dtype]), et.from_numpy(x).to_dtype(dtype)
        for p in [0.0, 0.1, 0.5, 0.3, 1.0]:
            both(5, [lambda: et.op("bernoulli", xe, p=p)], [lambda: torch.bernoulli(xt, p)])
            both(6, [lambda: et.dropout(xe, p), lambda: et.dropout(xe, p, False)],
                 [lambda: F.dropout(xt, p, True), lambda: F.dropout(xt, p, False)])


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_multinomial_with_replacement(dtype):
    rng = np.random.default_rng(3)
    for shape in [[4], [3, 10], [2, 1000]]:
        p = rng.random(shape) * (rng.random(shape) > 0.3)
        p[..., 0] += 0.1
        pt, pe = torch.from_numpy(p).to(FLOATS[dtype]), et.from_numpy(p).to_dtype(dtype)
        for n in [2, 7, 500]:
            both(7, [lambda: et.op("multinomial", pe, num_samples=n, replacement=True)],
                 [lambda: torch.multinomial(pt, n, True)])


@mkl_only
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_multinomial_without_replacement(dtype):
    rng = np.random.default_rng(4)
    for shape in [[4], [3, 10], [2, 1000]]:
        p = rng.random(shape) + 0.01
        pt, pe = torch.from_numpy(p).to(FLOATS[dtype]), et.from_numpy(p).to_dtype(dtype)
        for n, repl in [(1, True), (1, False), (3, False), (4, False)]:
            both(8, [lambda: et.op("multinomial", pe, num_samples=n, replacement=repl)],
                 [lambda: torch.multinomial(pt, n, repl)])


def test_interleaved_ops():
    z = np.linspace(0.0, 1.0, 37)
    ours = [lambda: et.op("rand", size=[3]), lambda: et.randn([5]), lambda: et.op("randint", low=-4, high=9, size=[21]),
            lambda: et.op("bernoulli", et.from_numpy(z)), lambda: et.randn([40], "bf16"), lambda: et.randn([3]),
            lambda: et.op("rand", size=[19], dtype="fp64"), lambda: et.randn([1])]
    theirs = [lambda: torch.rand(3), lambda: torch.randn(5), lambda: torch.randint(-4, 9, [21]),
              lambda: torch.bernoulli(torch.from_numpy(z)), lambda: torch.randn(40, dtype=torch.bfloat16),
              lambda: torch.randn(3), lambda: torch.rand(19, dtype=torch.float64), lambda: torch.randn(1)]
    both(9, ours, theirs)


def rng_key(backend):
    return {"cpu": "enkai.cpu", "torch": "torch.cpu"}[backend]


def snapshot(path):
    return path / os.readlink(path / "latest")


def put_state(path, key, state):
    """Replaces a saved checkpoint's generator state and rehashes its files."""
    snap = snapshot(path)
    save_file({key: state}, str(snap / "rng.safetensors"), metadata={"format": "enkai-rng-1"})
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in snap.iterdir() if p.name != "integrity.json"}
    (snap / "integrity.json").write_text(json.dumps({"format": 1, "files": files}))


def test_state_is_torchs_and_round_trips(tmp_path, backend):
    p = et.zeros([2])
    et.manual_seed(21)
    et.op("rand", size=[10])
    et.randn([3])  # leaves a cached normal in the state
    et.checkpoint_save(tmp_path, [p])
    torch.manual_seed(21)
    torch.rand(10)
    torch.randn(3)
    saved = load_file(str(snapshot(tmp_path) / "rng.safetensors"))[rng_key(backend)]
    assert torch.equal(saved, torch.get_rng_state())
    after = [torch.randn(3), torch.rand(700), torch.randint(0, 2**40, [9])]
    for _ in range(2):
        et.manual_seed(5)
        et.checkpoint_load(tmp_path)
        for g, r in zip([et.randn([3]), et.op("rand", size=[700]), et.op("randint", high=2**40, size=[9])], after):
            same(g, r)


def test_a_state_saved_by_torch_loads(tmp_path, backend):
    et.checkpoint_save(tmp_path, [et.zeros([2])])
    torch.manual_seed(77)
    torch.randn(7)
    torch.rand(1000)
    state = torch.get_rng_state()
    put_state(tmp_path, rng_key(backend), state)
    et.checkpoint_load(tmp_path)
    # Drawn before torch's: in this process the torch backend and Python's
    # torch share libtorch's default generator.
    a, b = et.randn([7]), et.op("rand", size=[33])
    torch.set_rng_state(state)
    same(a, torch.randn(7))
    same(b, torch.rand(33))


def test_an_old_32_byte_state_loads(tmp_path, backend):
    if backend != "cpu":
        pytest.skip("only the native generator had a 32-byte state")
    et.checkpoint_save(tmp_path, [et.zeros([2])])
    old = np.arange(1, 33, dtype=np.uint8)
    put_state(tmp_path, "enkai.cpu", torch.from_numpy(old))
    et.checkpoint_load(tmp_path)
    a = et.randn([20])
    et.checkpoint_load(tmp_path)
    same(a, torch.from_numpy(et.randn([20]).numpy()))
    # Documented: the four little-endian words, xored, seed mt19937.
    seed = int(np.bitwise_xor.reduce(old.view(np.uint64)))
    torch.manual_seed(seed)
    same(a, torch.randn(20))


def test_a_malformed_state_is_refused(tmp_path, backend):
    if backend != "cpu":
        pytest.skip("torch's own checks")
    et.checkpoint_save(tmp_path, [et.zeros([2])])
    bad = torch.get_rng_state().clone()
    bad[8:12] = 0  # left = 0
    for state in [torch.zeros(31, dtype=torch.uint8), bad]:
        put_state(tmp_path, "enkai.cpu", state)
        et.manual_seed(3)
        with pytest.raises(et.EnkaiError):
            et.checkpoint_load(tmp_path)
        et.manual_seed(3)
        same(et.op("rand", size=[4]), (torch.manual_seed(3), torch.rand(4))[1])
