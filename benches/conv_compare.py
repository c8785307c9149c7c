"""`make bench`: conv2d forward + backward, native (the libtorch-free
library through the Python package, in a subprocess that loads no torch)
against PyTorch eager, at 1 and 2 threads, with the machine's fp32 FMA
peak (`benches/fma_peak.c`) measured in the same run.

x [32, 64, 56, 56], weight [64, 64, 3, 3], padding 1, no bias, fp32;
one step is `conv2d(x, w).sum().backward()` (gradients of x and w,
accumulated into .grad on both sides). GFLOP/s counts the three
products' 2·N·OC·IC·kh·kw·OH·OW flops each. Each side runs ROUNDS
alternations and keeps its best.

    python benches/conv_compare.py build/bench/fma_peak [path/to/notorch/libenkai_tensor.so]
"""

import json
import os
import subprocess
import sys
import time

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
ITERS = 3
N, C, H, W, OC, K = 32, 64, 56, 56, 64, 3
FLOPS = 3 * 2 * N * OC * C * K * K * H * W


def best_ms(step, iters):
    step()  # warm-up: the first call allocates
    best = float("inf")
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def native_child(threads):
    """Runs in the subprocess: only enkai_tensor is loaded."""
    import numpy as np

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
    import enkai_tensor as et

    et.backend_set("cpu")
    et.set_num_threads(threads)
    rng = np.random.default_rng(0)
    x = et.from_numpy(rng.standard_normal((N, C, H, W), dtype=np.float32)).require_grad()
    w = et.from_numpy((rng.standard_normal((OC, C, K, K), dtype=np.float32) * 0.05)).require_grad()

    def step():
        et.op("conv2d", x, w, None, padding=[1, 1]).sum().backward()

    print(json.dumps({"ms": best_ms(step, ITERS)}))


def native(lib, threads):
    env = dict(os.environ, ENKAI_TENSOR_PATH=lib, ENKAI_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, __file__, "--native", str(threads)], check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])["ms"]


def eager(threads):
    import torch

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, C, H, W, generator=g).requires_grad_()
    w = (torch.randn(OC, C, K, K, generator=g) * 0.05).requires_grad_()

    def step():
        torch.nn.functional.conv2d(x, w, None, padding=1).sum().backward()

    return best_ms(step, ITERS)


def main():
    fma_bin = sys.argv[1]
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    lib = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "target", "notorch", "release", "libenkai_tensor.so")
    peak = max(float(subprocess.run([fma_bin], check=True, capture_output=True, text=True).stdout) for _ in range(3))
    print(f"fp32 FMA peak, 1 thread (widest vector FMA, registers only): {peak:.1f} GFLOP/s")
    print(f"conv2d fwd+bwd x [{N},{C},{H},{W}] w [{OC},{C},{K},{K}] pad 1 fp32 ({FLOPS / 1e9:.1f} GFLOP per step), best of {ROUNDS}x{ITERS}")
    print(f"{'threads':>7} {'native ms':>10} {'eager ms':>9} {'ratio':>6} {'native GF/s':>11} {'eager GF/s':>10} {'native/peak':>11} {'eager/peak':>10}")
    for threads in (1, 2):
        nat, eag = float("inf"), float("inf")
        for _ in range(ROUNDS):
            nat = min(nat, native(lib, threads))
            eag = min(eag, eager(threads))
        gn, ge = FLOPS / nat / 1e6, FLOPS / eag / 1e6
        pk = peak * threads
        print(f"{threads:>7} {nat:>10.1f} {eag:>9.1f} {nat / eag:>6.2f} {gn:>11.1f} {ge:>10.1f} {gn / pk:>11.0%} {ge / pk:>10.0%}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--native":
        native_child(int(sys.argv[2]))
    else:
        main()
