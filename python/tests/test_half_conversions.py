"""fp16 and bf16 conversions, bit for bit against `torch.Tensor.to`, on both
backends, over every class of fp32 bit pattern: normals, fp32 subnormals,
values that become fp16 subnormals, ±0, ±inf, NaNs (quiet and signalling,
both signs, payloads), the largest finite values and the first that
overflow, and exact ties between two neighbouring half values (which round
to the even one) and their neighbours one fp32 ulp away. Also half → fp32 /
fp64 (exact) and fp64 → half."""

import numpy as np
import pytest
import torch

import enkai_tensor as et

pytestmark = pytest.mark.usefixtures("backend")

TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16}


def bits32(v):
    return np.array(v, dtype=np.uint32).view(np.float32)


def patterns(half):
    rng = np.random.default_rng(0)
    u = []
    u += list(rng.integers(0, 2**32, 4000, dtype=np.uint64))  # anything, NaNs included
    u += [0x00000000, 0x80000000, 0x7F800000, 0xFF800000]  # ±0, ±inf
    u += [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FA00000, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC12345]  # NaNs
    u += [0x00000001, 0x007FFFFF, 0x80000001, 0x00400000]  # fp32 subnormals
    u += list(rng.integers(0, 0x00800000, 200, dtype=np.uint64))
    x = bits32(np.array(u, dtype=np.uint64).astype(np.uint32))
    # Exact ties: the midpoint of every pair of neighbouring half values in a
    # sample (subnormals, normals, near the top), and one fp32 ulp each side.
    h = TORCH[half]
    finite = torch.from_numpy(x[np.isfinite(x)]).to(h)
    if half == "fp16":
        extra = np.concatenate([np.arange(0, 2048, dtype=np.uint16), np.arange(0x7B00, 0x7C00, dtype=np.uint16)])
        finite = torch.cat([finite, torch.from_numpy(extra.view(np.float16)).to(h)])
    else:
        extra = np.concatenate([np.arange(0, 512, dtype=np.uint16), np.arange(0x7F00, 0x7F80, dtype=np.uint16)])
        finite = torch.cat([finite, torch.from_numpy(extra.astype(np.int16)).view(torch.bfloat16)])
    a = finite.float().numpy()
    nxt = torch.from_numpy(a).to(h).float().numpy()
    up = np.nextafter(torch.from_numpy(a).to(h).float().numpy(), np.float32(np.inf))
    # The next half value above each: step the half's bits by one.
    hb = torch.from_numpy(a).to(h).view(torch.int16).numpy().astype(np.int32)
    hb = np.where(hb >= 0, hb + 1, hb - 1).astype(np.int16)
    above = torch.from_numpy(hb).view(h).float().numpy()
    ok = np.isfinite(above) & np.isfinite(nxt)
    mid = ((nxt[ok].astype(np.float64) + above[ok].astype(np.float64)) / 2).astype(np.float32)
    ties = np.concatenate([mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))])
    top = {"fp16": [65504, 65519.996, 65520, 65536, -65520, 1e5], "bf16": [3.3895314e38, 3.4e38, -3.4e38]}[half]
    del up
    return np.concatenate([x, ties, -ties, np.array(top, np.float32)]).astype(np.float32)


def same_bits(ours, theirs, what):
    a = np.frombuffer(ours.to_bytes(), np.uint16)
    b = theirs.view(torch.int16).numpy().view(np.uint16)
    bad = np.nonzero(a != b)[0]
    assert bad.size == 0, f"{what}: {bad.size} differ, first {[(hex(a[i]), hex(b[i])) for i in bad[:5]]}"


@pytest.mark.parametrize("half", ["fp16", "bf16"])
def test_fp32_to_half_is_torchs_bit_for_bit(half):
    x = patterns(half)
    ours = et.from_numpy(x).to_dtype(half)
    theirs = torch.from_numpy(x).to(TORCH[half])
    same_bits(ours, theirs, f"fp32 -> {half}")


@pytest.mark.parametrize("half", ["fp16", "bf16"])
def test_fp64_to_half_is_torchs_bit_for_bit(half):
    x = patterns(half).astype(np.float64)
    rng = np.random.default_rng(1)
    # Values with bits below fp32's: fp64 -> fp32 -> half could round twice.
    x = np.concatenate([x, x[np.isfinite(x)] * (1 + rng.uniform(-1e-9, 1e-9, np.isfinite(x).sum()))])
    same_bits(et.from_numpy(x).to_dtype(half), torch.from_numpy(x).to(TORCH[half]), f"fp64 -> {half}")


@pytest.mark.parametrize("half", ["fp16", "bf16"])
def test_half_widens_exactly(half):
    every = torch.arange(0, 2**16, dtype=torch.int32).to(torch.int16).view(TORCH[half])
    ours = et.from_bytes(every.view(torch.int16).numpy().tobytes(), [2**16], half)
    for wide, tdt in (("fp32", torch.float32), ("fp64", torch.float64)):
        a, b = ours.to_dtype(wide).numpy(), every.to(tdt).numpy()
        fin = ~np.isnan(b)
        assert np.array_equal(np.isnan(a), ~fin)
        assert np.array_equal(a[fin].view(np.uint32 if wide == "fp32" else np.uint64), b[fin].view(np.uint32 if wide == "fp32" else np.uint64))
