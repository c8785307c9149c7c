"""`make bench`: runs the C ABI bench (a) and the raw tch bench (b) as
subprocesses, times PyTorch eager (c) here, all with the same thread count,
and prints one table with the ratios."""

import os
import re
import shutil
import subprocess
import sys
import tempfile

import torch
from timing import bench
import torch.nn.functional as F

THREADS = int(os.environ.get("OMP_NUM_THREADS", "1"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))


def parse(out):
    return {name: float(ns) for name, ns in (line.split() for line in out.strip().splitlines())}


def run(cmd):
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), MKL_NUM_THREADS=str(THREADS))
    return parse(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)


def pytorch():
    torch.set_num_threads(THREADS)
    a, b = torch.randn(4), torch.randn(4)
    m, n = torch.randn(64, 64), torch.randn(64, 64)
    x, w, bias = torch.randn(32, 256), torch.ones(256), torch.zeros(256)
    with torch.no_grad():
        return {
            "zeros_4": bench(lambda: torch.zeros(4), 200_000),
            "add_4": bench(lambda: a + b, 200_000),
            "matmul_64": bench(lambda: m @ n, 20_000),
            "layernorm_gelu_32x256": bench(lambda: F.gelu(F.layer_norm(x, (256,), w, bias, 1e-5)), 5_000),
        }


COUNT_OPS = ("zeros_4", "add_4")
# `op_<name>`: the same op through the generic entry `enkai_op`, against the typed function's anchors.
GENERIC = ("op_add_4",)


def instructions(cmd, n=2000, ops=COUNT_OPS):
    """Instructions per call (op + free) under callgrind, read from the
    inclusive cost of each `count_<op>` loop, so start-up is not counted."""
    with tempfile.NamedTemporaryFile(suffix=".cg") as f:
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={f.name}", *cmd, "count", str(n)],
                       check=True, capture_output=True)
        out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", f.name],
                             check=True, capture_output=True, text=True).stdout
    per = {}
    for op in ops:
        m = re.search(rf"^\s*([\d,]+) .*count_{op}\b", out, re.M)
        per[op] = int(m.group(1).replace(",", "")) / n
    return per


def main():
    c_bin, tch_bin = sys.argv[1], sys.argv[2]
    # Alternate the three sides a few times and keep each one's best, so a
    # burst of noise on this shared machine does not land on one side only.
    ours, raw, eager = {}, {}, {}
    for _ in range(ROUNDS):
        for acc, result in ((ours, run([c_bin])), (raw, run([tch_bin])), (eager, pytorch())):
            for op, ns in result.items():
                acc[op] = min(acc.get(op, float("inf")), ns)
    print(f"threads={THREADS}; ns per op, best of {ROUNDS} alternating runs x 7 rounds each")
    print(f"{'op':<24}{'(a) C ABI':>12}{'(b) raw tch':>13}{'(c) PyTorch':>13}{'a/b':>7}{'a/c':>7}")
    for op in ours:
        base = op[3:] if op in GENERIC else op
        print(f"{op:<24}{ours[op]:>12.1f}{raw[base]:>13.1f}{eager[base]:>13.1f}"
              f"{ours[op] / raw[base]:>7.2f}{ours[op] / eager[base]:>7.2f}")
    for op in GENERIC:
        print(f"enkai_op vs the typed function ({op[3:]}): {ours[op] / ours[op[3:]]:.3f}x (target <= 1.10)")
    if shutil.which("valgrind"):
        print("instructions per call (callgrind; op + free), the noise-free check")
        print(f"{'op':<24}{'(a) C ABI':>12}{'(b) raw tch':>13}{'a/b':>7}")
        a, b = instructions([c_bin], ops=COUNT_OPS + GENERIC), instructions([tch_bin])
        for op in COUNT_OPS + GENERIC:
            base = op[3:] if op in GENERIC else op
            print(f"{op:<24}{a[op]:>12.0f}{b[base]:>13.0f}{a[op] / b[base]:>7.2f}")


if __name__ == "__main__":
    main()
