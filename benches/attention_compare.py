"""`make bench`: `scaled_dot_product_attention`, causal, forward and
backward, on the native backend's fused kernel against PyTorch's CPU flash
kernel (`F.scaled_dot_product_attention`, which PyTorch runs on its
flash-attention CPU path for these inputs), at 1 and 2 threads; then the
peak memory of one forward+backward at L = 1024 and 4096, each side in a
fresh process (the growth of VmHWM, reset just before, over VmRSS), to show that
native's does not grow with L² (a materialised [L, L] score matrix per head
would).

    python benches/attention_compare.py
"""

import json
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import enkai_tensor as et
from timing import best

SHAPE = (8, 8, 1024, 64)
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))


def flops(b, h, l, e, causal=True):
    # Forward: QKᵀ and PV, 2·L·L·E each; backward: 2.5× the forward's
    # (five products); a causal mask halves both.
    f = 2 * 2 * b * h * l * l * e
    return (f + 2.5 * f) / (2 if causal else 1)


def ours_step(q, k, v):
    out = et.op("scaled_dot_product_attention", q, k, v, is_causal=True)
    out.sum().backward()


def theirs_step(q, k, v):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()


def speed():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(3)]
    ours = [et.from_numpy(a).require_grad() for a in arrays]
    theirs = [torch.from_numpy(a).requires_grad_() for a in arrays]
    print(f"scaled_dot_product_attention causal fwd+bwd {list(SHAPE)} fp32: native (enkai_op) vs PyTorch "
          f"{torch.__version__} CPU flash kernel, best of {ROUNDS}")
    print(f"{'threads':>8}{'native ms':>12}{'torch ms':>12}{'native/torch':>14}{'native GFLOP/s':>16}")
    for n in (1, 2):
        et.set_num_threads(n)
        torch.set_num_threads(n)
        o, t = best(lambda: ours_step(*ours), ROUNDS), best(lambda: theirs_step(*theirs), ROUNDS)
        print(f"{n:>8}{o * 1e3:>12.1f}{t * 1e3:>12.1f}{o / t:>14.2f}{flops(*SHAPE) / o / 1e9:>16.1f}")
    print("target: native/torch <= 1.00")


def peak_child(side, l):
    """One forward+backward at [1, 8, l, 64]; prints the peak RSS growth in MiB."""
    shape = (1, 8, l, 64)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    if side == "native":
        xs = [et.from_numpy(a).require_grad() for a in arrays]
        step = lambda: ours_step(*xs)
    else:
        xs = [torch.from_numpy(a).requires_grad_() for a in arrays]
        step = lambda: theirs_step(*xs)
    # The high-water mark reset (clear_refs 5), so that the imports' peak does not hide the step's.
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = status_kib("VmRSS")
    step()
    print(json.dumps({"mib": (status_kib("VmHWM") - base) / 1024}))


def status_kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def memory():
    print("peak RSS growth of one causal fwd+bwd at [1, 8, L, 64] fp32 (fresh process each; "
          "q, k, v are 2 MiB at L = 1024, 8 MiB at 4096; one [L, L] fp32 score matrix per head is 32 / 512 MiB)")
    print(f"{'L':>6}{'native MiB':>12}{'torch MiB':>12}")
    for l in (1024, 4096):
        got = {}
        for side in ("native", "torch"):
            out = subprocess.run([sys.executable, __file__, "--peak", side, str(l)], check=True, capture_output=True, text=True)
            got[side] = json.loads(out.stdout.strip().splitlines()[-1])["mib"]
        print(f"{l:>6}{got['native']:>12.1f}{got['torch']:>12.1f}")
    print("target: native's growth from L = 1024 to 4096 about 4x (linear in L), not 16x")


if __name__ == "__main__":
    et.backend_set("cpu")
    if len(sys.argv) == 4 and sys.argv[1] == "--peak":
        peak_child(sys.argv[2], int(sys.argv[3]))
    else:
        speed()
        memory()
