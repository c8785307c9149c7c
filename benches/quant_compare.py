"""`make bench`: low precision on the native backend, 1 thread, ratios
measured in this run.

- int8 GEMM: `linear` of a [1024, 1024] fp32 activation with a qint8 weight
  [1024, 1024] (the activation quantized per row, int8 x int8 -> int32 on
  AVX-512 VNNI, or on AVX2's vpmaddwd where VNNI is absent, rescaled), in
  TOPS, against the native fp32 `linear` of the same sizes in GFLOP/s (2 ops
  per multiply-add for both). Target: >= 3x.
- the same with a q8_0 weight (block scales: one more multiply-add per 32).
- int8 `linear` 4096x4096 at batch 1 against PyTorch's
  `torch.ao.nn.quantized.dynamic.Linear` (fbgemm, the same int8 weights):
  Target: <= 0.5x its time.
- bf16 `matmul` 1024^3 (AMX tiles where the CPU has them, else the `gemm`
  crate, which widens to fp32) against native fp32. Target: >= 1.8x.

Every figure is also printed as a fraction of the register-only fp32 FMA
peak that `fma_peak` measures, scaled by what the CPU's int8 or bf16
instruction does per instruction where one FMA does 2 flops per fp32 lane:
int8 4x with AVX-512 VNNI (`vpdpbusd`), 2x with AVX2 alone (`vpmaddwd`);
bf16 2x with AVX-512 BF16 or AMX, 1x without (the product runs in fp32).

    ENKAI_TENSOR_PATH=<native lib> python benches/quant_compare.py [fma_peak binary]
"""

import os
import subprocess
import sys

import numpy as np
import torch

import enkai_tensor as et
from timing import best

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "7"))


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def main():
    flags = cpu_flags()
    int8_mult = 4 if "avx512_vnni" in flags else 2
    bf16_mult = 2 if {"avx512_bf16", "amx_bf16"} & flags else 1
    et.set_num_threads(1)
    torch.set_num_threads(1)
    peak = None
    if len(sys.argv) > 1:
        peak = float(subprocess.run([sys.argv[1]], capture_output=True, text=True, check=True).stdout.split()[0])
    rng = np.random.default_rng(0)
    n = 1024
    x = et.from_numpy(rng.standard_normal((n, n)).astype(np.float32))
    w = et.from_numpy(rng.standard_normal((n, n)).astype(np.float32))
    qw, q8 = et.quantize_per_channel(w, 0), et.quantize_q8_0(w)
    ops = 2 * n**3
    fp32 = best(lambda: et.op("linear", x, w), ROUNDS)
    i8 = best(lambda: et.op("linear", x, qw), ROUNDS)
    q80 = best(lambda: et.op("linear", x, q8), ROUNDS)
    xb, wb = x.to_dtype("bf16"), w.to_dtype("bf16")
    bf = best(lambda: et.matmul(xb, wb), ROUNDS)
    f32m = best(lambda: et.matmul(x, w), ROUNDS)

    def frac(rate, mult):
        return f"{rate / (peak * mult):>9.0%}" if peak else f"{'-':>9}"

    isa = "AVX-512 VNNI" if int8_mult == 4 else "AVX2 (no VNNI)"
    print(f"low precision on native, 1 thread, best of {ROUNDS}; fp32 FMA peak {peak or float('nan'):.1f} GFLOP/s; int8 on {isa}")
    print(f"{'case':<34}{'ms':>9}{'G(FL)OP/s':>11}{'vs fp32':>9}{'of peak':>9}")
    rows = [
        ("fp32 linear 1024^3", fp32, 1, 1),
        ("qint8 linear 1024^3", i8, fp32, int8_mult),
        ("q8_0 linear 1024^3", q80, fp32, int8_mult),
        ("fp32 matmul 1024^3", f32m, 1, 1),
        ("bf16 matmul 1024^3", bf, f32m, bf16_mult),
    ]
    for name, t, base, mult in rows:
        ratio = f"{base / t:>9.2f}" if base != 1 else f"{'':>9}"
        print(f"{name:<34}{t * 1e3:>9.2f}{ops / t / 1e9:>11.1f}{ratio}{frac(ops / t / 1e9, mult)}")

    # Batch 1, 4096 x 4096: memory-bound, against PyTorch's dynamic quantized Linear.
    m = 4096
    w4 = rng.standard_normal((m, m)).astype(np.float32)
    x4 = rng.standard_normal((1, m)).astype(np.float32)
    ours_w, ours_x = et.quantize_per_channel(et.from_numpy(w4), 0), et.from_numpy(x4)
    ours_q8 = et.quantize_q8_0(et.from_numpy(w4))
    lin = torch.nn.Linear(m, m, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(w4))
    theirs = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(lin), {torch.nn.Linear}, dtype=torch.qint8)
    tx = torch.from_numpy(x4)
    with torch.no_grad():
        t_torch = best(lambda: theirs(tx), ROUNDS * 3)
    t_ours = best(lambda: et.op("linear", ours_x, ours_w), ROUNDS * 3)
    t_q8 = best(lambda: et.op("linear", ours_x, ours_q8), ROUNDS * 3)
    print(f"\nint8 linear 4096x4096, batch 1, best of {ROUNDS * 3}: vs torch.ao dynamic quantized Linear ({torch.backends.quantized.engine})")
    print(f"{'case':<34}{'ms':>9}{'vs torch':>9}{'GB/s':>9}")
    print(f"{'torch.ao dynamic qint8':<34}{t_torch * 1e3:>9.3f}{1:>9.2f}{m * m / t_torch / 1e9:>9.1f}")
    print(f"{'native qint8':<34}{t_ours * 1e3:>9.3f}{t_ours / t_torch:>9.2f}{m * m / t_ours / 1e9:>9.1f}")
    print(f"{'native q8_0':<34}{t_q8 * 1e3:>9.3f}{t_q8 / t_torch:>9.2f}{m * m * 34 / 32 / t_q8 / 1e9:>9.1f}")


if __name__ == "__main__":
    main()
