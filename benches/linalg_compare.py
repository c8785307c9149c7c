"""`make bench`: torch.linalg's factorizations on the native backend (faer)
against libtorch (LAPACK from the wheel's MKL/OpenBLAS), at 1 thread, fp64:
`svd` of 512x512, `eigh` of 1024x1024, `cholesky` of 2048x2048. Each also
as a fraction of the measured FMA peak (the usual flop counts: svd with
vectors ~ 22 n^3, eigh with vectors ~ 9 n^3, cholesky n^3 / 3; fp64 runs at
half the fp32 peak that `fma_peak` reports).

    ENKAI_TENSOR_PATH=<native lib> python benches/linalg_compare.py [fma_peak binary]
"""

import os
import subprocess
import sys

import numpy as np
import torch

import enkai_tensor as et
from timing import best

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))


def spd(rng, n):
    x = rng.standard_normal((n, n))
    return x @ x.T + n * np.eye(n)


def main():
    et.set_num_threads(1)
    torch.set_num_threads(1)
    peak = None
    if len(sys.argv) > 1:
        out = subprocess.run([sys.argv[1]], capture_output=True, text=True, check=True).stdout.split()
        peak = float(out[0]) / 2  # fp64 GFLOP/s
    rng = np.random.default_rng(0)
    sq = rng.standard_normal((512, 512))
    sym = rng.standard_normal((1024, 1024))
    sym = (sym + sym.T) / 2
    pd = spd(rng, 2048)
    cases = [
        ("svd 512x512", lambda: et.linalg.svd(ours[0], full_matrices=False), lambda: torch.linalg.svd(theirs[0], full_matrices=False), 22 * 512**3),
        ("eigh 1024x1024", lambda: et.linalg.eigh(ours[1]), lambda: torch.linalg.eigh(theirs[1]), 9 * 1024**3),
        ("cholesky 2048x2048", lambda: et.linalg.cholesky(ours[2]), lambda: torch.linalg.cholesky(theirs[2]), 2048**3 / 3),
    ]
    ours = [et.from_numpy(a) for a in (sq, sym, pd)]
    theirs = [torch.from_numpy(a) for a in (sq, sym, pd)]
    print(f"torch.linalg, fp64, 1 thread, best of {ROUNDS}; PyTorch {torch.__version__}" + (f"; fp64 FMA peak {peak:.1f} GFLOP/s" if peak else ""))
    print(f"{'case':<22}{'native ms':>12}{'torch ms':>12}{'native/torch':>14}{'native % peak':>15}{'torch % peak':>14}")
    for name, o, t, flops in cases:
        a, b = best(o, ROUNDS), best(t, ROUNDS)
        frac = (lambda s: f"{flops / s / 1e9 / peak * 100:.0f}%") if peak else (lambda s: "-")
        print(f"{name:<22}{a * 1e3:>12.1f}{b * 1e3:>12.1f}{a / b:>14.2f}{frac(a):>15}{frac(b):>14}")
    print("target: native/torch <= 1.50 for each")


if __name__ == "__main__":
    main()
