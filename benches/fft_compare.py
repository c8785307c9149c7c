"""`make bench`: torch.fft on the native backend (rustfft/realfft) against
libtorch (pocketfft, or MKL where the wheel uses it), at 1 thread: `fft` of
2^20 complex64 points, and `rfft`/`irfft` of 2^20 real fp32 ones. Also as
GFLOP/s by the usual FFT count (5 n log2 n for a complex transform, half
that for a real one).

    ENKAI_TENSOR_PATH=<native lib> python benches/fft_compare.py
"""

import math
import os

import numpy as np
import torch

import enkai_tensor as et
from timing import best

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
N = 1 << 20


def main():
    et.set_num_threads(1)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    z = (rng.standard_normal(N) + 1j * rng.standard_normal(N)).astype(np.complex64)
    x = rng.standard_normal(N).astype(np.float32)
    oz, tz = et.from_numpy(z), torch.from_numpy(z)
    ox, tx = et.from_numpy(x), torch.from_numpy(x)
    oh, th = et.fft.rfft(ox), torch.fft.rfft(tx)
    flops = 5 * N * math.log2(N)
    cases = [
        ("fft 2^20 complex64", lambda: et.fft.fft(oz), lambda: torch.fft.fft(tz), flops),
        ("ifft 2^20 complex64", lambda: et.fft.ifft(oz), lambda: torch.fft.ifft(tz), flops),
        ("rfft 2^20 fp32", lambda: et.fft.rfft(ox), lambda: torch.fft.rfft(tx), flops / 2),
        ("irfft 2^20 fp32", lambda: et.fft.irfft(oh), lambda: torch.fft.irfft(th), flops / 2),
    ]
    print(f"torch.fft, 1 thread, best of {ROUNDS}; PyTorch {torch.__version__}")
    print(f"{'case':<22}{'native ms':>12}{'torch ms':>12}{'native/torch':>14}{'native GFLOP/s':>16}{'torch GFLOP/s':>15}")
    for name, o, t, fl in cases:
        a, b = best(o, ROUNDS), best(t, ROUNDS)
        print(f"{name:<22}{a * 1e3:>12.2f}{b * 1e3:>12.2f}{a / b:>14.2f}{fl / a / 1e9:>16.1f}{fl / b / 1e9:>15.1f}")


if __name__ == "__main__":
    main()
